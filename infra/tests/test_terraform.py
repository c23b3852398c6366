"""Properties of the Terraform in infra/terraform, checked without Terraform.

Run with the python-hcl2 virtualenv (infra/check.sh does):

    infra/.venv-hcl/bin/python -m unittest discover -s infra/tests -p 'test_terraform.py' -v

The policy documents are evaluated for concrete keys built exactly as
manifest/src/layout.rs builds them, and requests are simulated with IAM's
matching rules (explicit deny wins; `*` and `?` wildcards; conditions), so
"the shipper is limited to its prefix" is tested as behaviour, not as text.
Where a Terraform expression is computed by a Python twin here, the test
pins the expression's text first, so the two cannot drift apart silently.
"""

from __future__ import annotations

import re
import sys
import unittest
from pathlib import Path
from typing import Any

import hcl2

sys.path.insert(0, str(Path(__file__).resolve().parent))

import render_configs  # noqa: E402
from tfsubset import (  # noqa: E402
    TemplateError,
    Unsupported,
    blocks,
    decode_literal,
    evaluate,
    literal,
    load_dir,
    locals_of,
    referenced_names,
    render,
    terraform_jsonencode,
)

INFRA = Path(__file__).resolve().parent.parent
REPO = INFRA.parent
TF = INFRA / "terraform"
BUCKET = TF / "modules" / "bucket"
IAM = TF / "modules" / "iam"
REPLICATION = TF / "modules" / "replication"
EXAMPLE = TF / "examples" / "two-region-dr"

BUCKET_ARN = "arn:aws:s3:::segmirror-test"
KMS_ARN = "arn:aws:kms:eu-west-1:111122223333:key/0000aaaa-bb11-cc22-dd33-eeeeee444444"
REGION = "eu-west-1"

# ------------------------------------------------------------------ layout
# Python twins of manifest/src/layout.rs and the modules' locals.


def format_root(key_prefix: str) -> str:
    """<prefix>/segmirror/v1 (layout::FORMAT_DIR under the prefix)."""
    return "segmirror/v1" if key_prefix == "" else f"{key_prefix}/segmirror/v1"


def cluster_keys(key_prefix: str, cluster: str) -> dict[str, str]:
    """One key of every kind layout.rs builds, for a cluster."""
    root = f"{format_root(key_prefix)}/{cluster}"
    part = f"{root}/topics/orders/vVw7a5a_QkWcK7JvBD2t8Q/3"
    return {
        "head": f"{root}/head/{7:020}.json",
        "manifest": f"{part}/manifest/{12:020}.json",
        "page": f"{part}/pages/{0:020}-{99:020}-18bcfe5683b0123456789abcdef.json",
        "data": f"{part}/data/{100:020}-{199:020}-e{5:010}-abc123.batches",
    }


class LayoutTwin(unittest.TestCase):
    """The twins above agree with the Rust layout (its pinned test keys)."""

    def test_keys_match_layout_rs(self) -> None:
        src = (REPO / "manifest" / "src" / "layout.rs").read_text()
        self.assertIn('pub const FORMAT_DIR: &str = "segmirror/v1";', src)
        keys = cluster_keys("dr/prod", "Ab-c_9")
        for kind in ("head", "manifest", "page", "data"):
            self.assertIn(f'"{keys[kind]}"', src, f"{kind} key differs from layout.rs's pinned test")


# --------------------------------------------------------- IAM simulation


def _wild(pattern: str, value: str, case_insensitive: bool = False) -> bool:
    rx = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(rx, value, re.I if case_insensitive else 0) is not None


class Statement:
    """An evaluated statement of an aws_iam_policy_document."""

    def __init__(self, raw: dict, env: dict[str, Any]):
        self.sid = decode_literal(raw["sid"]) if "sid" in raw else ""
        self.effect = decode_literal(raw.get("effect", '"Allow"'))
        self.actions: list[str] = evaluate(raw.get("actions", []), env)
        self.not_actions = raw.get("not_actions")
        self.resources: list[str] = evaluate(raw.get("resources", []), env)
        self.not_resources = raw.get("not_resources")
        self.principals = [
            (decode_literal(p["type"]), evaluate(p["identifiers"], env)) for p in raw.get("principals", [])
        ]
        self.conditions = []
        for c in raw.get("condition", []):
            try:
                values = evaluate(c["values"], env)
            except Unsupported:
                values = None  # unknown: treated conservatively in matches()
            self.conditions.append((decode_literal(c["test"]), decode_literal(c["variable"]), values))
        if self.not_actions is not None or self.not_resources is not None:
            raise Unsupported(f"{self.sid}: NotAction/NotResource are not simulated")

    def _condition(self, test: str, variable: str, values: list[str] | None, ctx: dict[str, str]) -> bool:
        if values is None:
            # An unknown condition value: assume it holds for an Allow (the
            # grant can only be narrower than simulated) and not for a Deny.
            return self.effect == "Allow"
        if variable not in ctx:
            return False
        have = ctx[variable]
        if test == "StringLike":
            return any(_wild(v, have) for v in values)
        if test == "StringEquals":
            return have in values
        if test == "Bool":
            return have.lower() in [v.lower() for v in values]
        if test == "NumericLessThan":
            return any(float(have) < float(v) for v in values)
        raise Unsupported(f"condition operator {test}")

    def matches(self, action: str, resource: str, ctx: dict[str, str]) -> bool:
        return (
            any(_wild(a, action, case_insensitive=True) for a in self.actions)
            and any(_wild(r, resource) for r in self.resources)
            and all(self._condition(t, v, vals, ctx) for t, v, vals in self.conditions)
        )


def decide(statements: list[Statement], action: str, resource: str, ctx: dict[str, str] | None = None) -> bool:
    """IAM evaluation of one policy: explicit deny wins, then any allow."""
    ctx = ctx or {}
    if any(s.effect == "Deny" and s.matches(action, resource, ctx) for s in statements):
        return False
    return any(s.effect == "Allow" and s.matches(action, resource, ctx) for s in statements)


def policy(doc: dict, name: str, env: dict[str, Any]) -> list[Statement]:
    docs = blocks(doc, "data", "aws_iam_policy_document")
    self_ = docs[name]
    raw = list(self_.get("statement", []))
    for dyn in self_.get("dynamic", []):
        for _, body in dyn.items():
            raw.extend(body["content"])  # dynamic statements included: over-approximates
    return [Statement(s, env) for s in raw]


def obj(key: str) -> str:
    return f"{BUCKET_ARN}/{key}"


# Every S3 action that writes, deletes or reconfigures anything (object and
# bucket level), for "may not" checks.
WRITE_ACTIONS = [
    "s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion", "s3:AbortMultipartUpload",
    "s3:PutObjectTagging", "s3:DeleteObjectTagging", "s3:PutObjectAcl", "s3:PutObjectRetention",
    "s3:PutObjectLegalHold", "s3:RestoreObject", "s3:ReplicateObject", "s3:ReplicateDelete",
    "s3:BypassGovernanceRetention",
]
BUCKET_ADMIN_ACTIONS = [
    "s3:PutBucketPolicy", "s3:DeleteBucketPolicy", "s3:PutLifecycleConfiguration", "s3:DeleteBucket",
    "s3:PutBucketVersioning", "s3:PutReplicationConfiguration", "s3:PutEncryptionConfiguration",
    "s3:PutBucketPublicAccessBlock", "s3:PutBucketAcl", "s3:ListBucketVersions", "s3:GetBucketPolicy",
]


# ------------------------------------------------------------------ syntax


class Syntax(unittest.TestCase):
    def test_every_tf_file_parses(self) -> None:
        files = sorted(TF.rglob("*.tf"))
        self.assertGreater(len(files), 10)
        for f in files:
            with self.subTest(file=str(f.relative_to(INFRA))), f.open() as fh:
                hcl2.load(fh)

    def test_tfvars_example_parses(self) -> None:
        with (EXAMPLE / "terraform.tfvars.example").open() as fh:
            hcl2.load(fh)


# ------------------------------------------------------------ bucket module


class BucketModule(unittest.TestCase):
    doc = load_dir(BUCKET)

    def test_locals_are_the_twins(self) -> None:
        loc = locals_of(self.doc)
        self.assertEqual(
            loc["format_root"],
            '${var.key_prefix == "" ? "segmirror/v1" : "${var.key_prefix}/segmirror/v1"}',
        )
        self.assertEqual(
            loc["bucket_url"],
            '${var.key_prefix == "" ? "s3://${var.bucket_name}" : "s3://${var.bucket_name}/${var.key_prefix}"}',
        )
        self.assertEqual(render_configs.bucket_url("b", ""), "s3://b")
        self.assertEqual(render_configs.bucket_url("b", "x/y"), "s3://b/x/y")

    def test_policy_denies_non_tls(self) -> None:
        stmts = policy(self.doc, "bucket", {"aws_s3_bucket.this.arn": BUCKET_ARN})
        deny = [s for s in stmts if s.effect == "Deny"]
        tls = [
            s for s in deny
            if ("Bool", "aws:SecureTransport", ["false"]) in s.conditions and ("*", ["*"]) in s.principals
        ]
        self.assertTrue(tls, "no Deny for everyone when aws:SecureTransport is false")
        insecure = {"aws:SecureTransport": "false", "s3:TlsVersion": "1.3"}
        secure = {"aws:SecureTransport": "true", "s3:TlsVersion": "1.3"}
        for action, resource in [
            ("s3:GetObject", obj("k")), ("s3:PutObject", obj("a/b")), ("s3:DeleteObject", obj("k")),
            ("s3:ListBucket", BUCKET_ARN), ("s3:PutBucketPolicy", BUCKET_ARN),
        ]:
            with self.subTest(action=action):
                self.assertTrue(any(s.matches(action, resource, insecure) for s in tls))
                self.assertFalse(any(s.matches(action, resource, secure) for s in deny))
        self.assertTrue(any(s.matches("s3:GetObject", obj("k"), {"aws:SecureTransport": "true", "s3:TlsVersion": "1.1"}) for s in deny))
        pol = blocks(self.doc, "resource", "aws_s3_bucket_policy")["this"]
        self.assertEqual(pol["policy"], "${data.aws_iam_policy_document.bucket.json}")

    def test_encryption_versioning_public_access(self) -> None:
        sse = blocks(self.doc, "resource", "aws_s3_bucket_server_side_encryption_configuration")["this"]
        rule = sse["rule"][0]
        self.assertEqual(rule["apply_server_side_encryption_by_default"][0]["sse_algorithm"], '"aws:kms"')
        self.assertEqual(rule["apply_server_side_encryption_by_default"][0]["kms_master_key_id"], "${local.kms_key_arn}")
        self.assertIs(rule["bucket_key_enabled"], True)
        ver = blocks(self.doc, "resource", "aws_s3_bucket_versioning")["this"]
        self.assertEqual(ver["versioning_configuration"][0]["status"], '"Enabled"')
        pab = blocks(self.doc, "resource", "aws_s3_bucket_public_access_block")["this"]
        for k in ("block_public_acls", "block_public_policy", "ignore_public_acls", "restrict_public_buckets"):
            self.assertIs(pab[k], True, k)
        key = blocks(self.doc, "resource", "aws_kms_key")["this"]
        self.assertIs(key["enable_key_rotation"], True)

    def test_lifecycle_expires_only_tagged_data_objects(self) -> None:
        lc = blocks(self.doc, "resource", "aws_s3_bucket_lifecycle_configuration")["this"]
        rules = list(lc["rule"])
        for dyn in lc.get("dynamic", []):
            for name, body in dyn.items():
                self.assertEqual(name, '"rule"')
                rules.extend(body["content"])
        by_id = {decode_literal(r["id"]): r for r in rules}

        abort = [r for r in rules if "abort_incomplete_multipart_upload" in r]
        self.assertEqual(len(abort), 1)
        self.assertEqual(
            abort[0]["abort_incomplete_multipart_upload"][0]["days_after_initiation"],
            "${var.abort_incomplete_multipart_upload_days}",
        )

        for rid, r in by_id.items():
            with self.subTest(rule=rid):
                for exp in r.get("expiration", []):
                    if "days" in exp or "date" in exp:
                        # Current versions expire only when tagged as data,
                        # under the segmirror root.
                        flt = r["filter"][0]
                        self.assertIn("and", flt, "a current-version expiry must filter by tag")
                        cond = flt["and"][0]
                        self.assertEqual(cond["prefix"], '"${local.format_root}/"')
                        self.assertEqual(cond["tags"], {"${(var.data_object_tag.key)}": "${var.data_object_tag.value}"})
                    else:
                        self.assertEqual(set(exp) - {"__is_block__"}, {"expired_object_delete_marker"})
                if "noncurrent_version_expiration" in r:
                    self.assertEqual(r["filter"][0]["prefix"], '"${local.format_root}/"')
                self.assertNotIn("transition", r)

        variables = blocks(self.doc, "variable")
        self.assertIsNone(variables["data_expiration_days"]["default"], "data expiry must be opt-in")
        self.assertEqual(
            literal(variables["data_object_tag"]["default"]), {"key": "segmirror-object", "value": "data"}
        )


# --------------------------------------------------------------- iam module


class IamModule(unittest.TestCase):
    doc = load_dir(IAM)

    def env(self, key_prefix: str, shipper: str | None, sources: list[str]) -> dict[str, Any]:
        root = format_root(key_prefix)
        return {
            "var.bucket_arn": BUCKET_ARN,
            "var.kms_key_arn": KMS_ARN,
            "var.bucket_region": REGION,
            "local.shipper_root": None if shipper is None else f"{root}/{shipper}",
            "local.applier_roots": [f"{root}/{s}" for s in sources],
            "local.kms_via_s3": f"s3.{REGION}.amazonaws.com",
        }

    def test_locals_are_the_twins(self) -> None:
        loc = locals_of(self.doc)
        self.assertEqual(loc["format_root"], '${var.key_prefix == "" ? "segmirror/v1" : "${var.key_prefix}/segmirror/v1"}')
        self.assertEqual(loc["shipper_root"], '${var.shipper_cluster_id == null ? null : "${local.format_root}/${var.shipper_cluster_id}"}')
        self.assertEqual(loc["applier_roots"], '${[for id in var.applier_source_cluster_ids : "${local.format_root}/${id}"]}')
        self.assertEqual(loc["kms_via_s3"], '"s3.${var.bucket_region}.amazonaws.com"')

    def test_shipper_is_limited_to_its_prefix(self) -> None:
        for prefix in ("kafka", "", "dr/prod"):
            with self.subTest(key_prefix=prefix):
                stmts = policy(self.doc, "shipper", self.env(prefix, "c1", []))
                own = cluster_keys(prefix, "c1")
                root = format_root(prefix)
                for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"):
                    for kind, key in own.items():
                        self.assertTrue(decide(stmts, action, obj(key)), f"{action} on own {kind}")
                    outside = [
                        *cluster_keys(prefix, "c2").values(),      # another cluster
                        *cluster_keys(prefix, "c1x").values(),     # a sibling sharing the name's start
                        *cluster_keys("other", "c1").values(),     # another prefix
                        f"{root}/c1",                              # the root itself, not under it
                        f"{root}/README",
                        "c1/head/x.json",
                    ]
                    for key in outside:
                        self.assertFalse(decide(stmts, action, obj(key)), f"{action} on {key}")
                    self.assertFalse(decide(stmts, action, BUCKET_ARN))
                for p in (f"{root}/c1/head/", f"{root}/c1/topics/orders/vVw7a5a_QkWcK7JvBD2t8Q/3/manifest/"):
                    self.assertTrue(decide(stmts, "s3:ListBucket", BUCKET_ARN, {"s3:prefix": p}), p)
                for p in (f"{root}/", f"{root}/c2/head/", f"{root}/c1x/", ""):
                    self.assertFalse(decide(stmts, "s3:ListBucket", BUCKET_ARN, {"s3:prefix": p}), repr(p))
                self.assertFalse(decide(stmts, "s3:ListBucket", BUCKET_ARN, {}), "unconditioned listing")
                for action in [a for a in WRITE_ACTIONS if a not in ("s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:PutObjectTagging")]:
                    self.assertFalse(decide(stmts, action, obj(own["data"])), action)
                for action in BUCKET_ADMIN_ACTIONS:
                    self.assertFalse(decide(stmts, action, BUCKET_ARN), action)

    def test_shipper_actions_and_resources_statically(self) -> None:
        stmts = policy(self.doc, "shipper", self.env("kafka", "c1", []))
        own = f"{BUCKET_ARN}/kafka/segmirror/v1/c1/*"
        for s in stmts:
            with self.subTest(sid=s.sid):
                self.assertEqual(s.effect, "Allow")
                for a in s.actions:
                    self.assertNotIn("*", a)
                    self.assertNotIn("?", a)
                if s.actions == ["s3:ListBucket"]:
                    self.assertEqual(s.resources, [BUCKET_ARN])
                    self.assertIn(("StringLike", "s3:prefix", ["kafka/segmirror/v1/c1/*"]), s.conditions)
                elif all(a.startswith("kms:") for a in s.actions):
                    self.assertEqual(s.resources, [KMS_ARN])
                    self.assertIn(("StringEquals", "kms:ViaService", [f"s3.{REGION}.amazonaws.com"]), s.conditions)
                else:
                    self.assertEqual(s.resources, [own])
                    self.assertTrue(set(s.actions) <= {"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:PutObjectTagging"})

    def test_shipper_kms_only_through_s3(self) -> None:
        stmts = policy(self.doc, "shipper", self.env("kafka", "c1", []))
        via = {"kms:ViaService": f"s3.{REGION}.amazonaws.com", "kms:EncryptionContext:aws:s3:arn": BUCKET_ARN}
        for action in ("kms:GenerateDataKey", "kms:Decrypt"):
            self.assertTrue(decide(stmts, action, KMS_ARN, via))
            self.assertFalse(decide(stmts, action, KMS_ARN, {}), f"{action} outside S3")
        for action in ("kms:Encrypt", "kms:ReEncryptFrom", "kms:CreateGrant", "kms:ScheduleKeyDeletion", "kms:PutKeyPolicy"):
            self.assertFalse(decide(stmts, action, KMS_ARN, via), action)

    def test_applier_has_no_write_action(self) -> None:
        read_only = {"s3:GetObject", "s3:ListBucket", "kms:Decrypt"}
        stmts = policy(self.doc, "applier", self.env("kafka", None, ["src", "other"]))
        for s in stmts:
            with self.subTest(sid=s.sid):
                self.assertEqual(s.effect, "Allow")
                self.assertTrue(set(s.actions) <= read_only, f"{s.actions} not read-only")
                for a in s.actions:
                    self.assertNotIn("*", a)
        everything = [obj(k) for c in ("src", "other", "x") for k in cluster_keys("kafka", c).values()]
        for action in WRITE_ACTIONS + ["kms:Encrypt", "kms:GenerateDataKey", "kms:ReEncryptTo"]:
            for resource in everything + [BUCKET_ARN, KMS_ARN]:
                self.assertFalse(decide(stmts, action, resource, {"kms:ViaService": f"s3.{REGION}.amazonaws.com"}), f"{action} {resource}")
        for action in BUCKET_ADMIN_ACTIONS:
            self.assertFalse(decide(stmts, action, BUCKET_ARN), action)

    def test_applier_reads_only_its_sources(self) -> None:
        stmts = policy(self.doc, "applier", self.env("kafka", None, ["src"]))
        for key in cluster_keys("kafka", "src").values():
            self.assertTrue(decide(stmts, "s3:GetObject", obj(key)))
        for key in [*cluster_keys("kafka", "other").values(), *cluster_keys("kafka", "srcx").values()]:
            self.assertFalse(decide(stmts, "s3:GetObject", obj(key)), key)
        self.assertTrue(decide(stmts, "s3:ListBucket", BUCKET_ARN, {"s3:prefix": "kafka/segmirror/v1/src/head/"}))
        self.assertFalse(decide(stmts, "s3:ListBucket", BUCKET_ARN, {"s3:prefix": "kafka/segmirror/v1/"}))


# ------------------------------------------------------- replication module


class ReplicationModule(unittest.TestCase):
    doc = load_dir(REPLICATION)

    def test_role_is_for_s3_and_writes_only_replicas_of_the_prefixes(self) -> None:
        assume = policy(self.doc, "assume", {})
        self.assertEqual(assume[0].principals, [("Service", ["s3.amazonaws.com"])])
        dest = "arn:aws:s3:::dest"
        env = {
            "var.source_bucket_arn": BUCKET_ARN,
            "var.destination_bucket_arn": dest,
            "var.source_kms_key_arn": KMS_ARN,
            "var.replica_kms_key_arn": KMS_ARN + "-replica",
            "var.source_region": "eu-west-1",
            "var.destination_region": "eu-central-1",
            "var.prefixes": ["kafka/segmirror/v1/c1/"],
        }
        stmts = policy(self.doc, "replication", env)
        self.assertTrue(decide(stmts, "s3:ReplicateObject", f"{dest}/kafka/segmirror/v1/c1/head/x.json"))
        self.assertFalse(decide(stmts, "s3:ReplicateObject", f"{dest}/kafka/segmirror/v1/c2/head/x.json"))
        self.assertFalse(decide(stmts, "s3:PutObject", f"{dest}/kafka/segmirror/v1/c1/head/x.json"))
        self.assertFalse(decide(stmts, "s3:ReplicateObject", f"{BUCKET_ARN}/kafka/segmirror/v1/c1/x"))

    def test_rules_replicate_kms_objects_with_the_replica_key(self) -> None:
        cfg = blocks(self.doc, "resource", "aws_s3_bucket_replication_configuration")["this"]
        (dyn,) = cfg["dynamic"]
        rule = dyn['"rule"']["content"][0]
        self.assertEqual(rule["filter"][0]["prefix"], "${rule.key}")
        crit = rule["source_selection_criteria"][0]["sse_kms_encrypted_objects"][0]
        self.assertEqual(crit["status"], '"Enabled"')
        dest = rule["destination"][0]
        self.assertEqual(dest["encryption_configuration"][0]["replica_kms_key_id"], "${var.replica_kms_key_arn}")
        self.assertEqual(dest["metrics"][0]["status"], '"Enabled"')


# ------------------------------------------------------------------ example


class Example(unittest.TestCase):
    doc = load_dir(EXAMPLE)

    def test_templates_use_exactly_the_variables_passed(self) -> None:
        maps = locals_of(self.doc)
        outputs = render_configs.template_outputs()
        self.assertEqual(
            set(outputs),
            {"shipper_toml", "applier_toml", "failback_shipper_toml", "failback_applier_toml", "doctor_expectations"},
        )
        for output, (template, local_name) in outputs.items():
            with self.subTest(output=output):
                used = referenced_names((EXAMPLE / template).read_text())
                self.assertEqual(used, set(maps[local_name]), "template variables and the map passed differ")

    def test_rendered_keys_are_config_fields(self) -> None:
        """Every key rendered is a field of the binary's config struct (both
        deny unknown fields); the binaries' `config check` in check.sh is the
        full test, this one names the field."""
        import tomllib

        for crate, struct_name, outputs in (
            ("applier", "ApplierConfig", ("applier_toml", "failback_applier_toml")),
            ("shipper", "ShipperConfig", ("shipper_toml", "failback_shipper_toml")),
        ):
            # The config module is a file or a directory (`config/mod.rs`).
            flat = REPO / crate / "src" / "config.rs"
            path = flat if flat.exists() else REPO / crate / "src" / "config" / "mod.rs"
            src = path.read_text()
            struct = re.search(rf"pub struct {struct_name} \{{(.*?)\n\}}", src, re.S)
            assert struct is not None, f"{struct_name} not found in {path}"
            fields = set(re.findall(r"pub (\w+):", struct.group(1)))
            self.assertIn("bucket", fields)
            for scenario, overrides in render_configs.SCENARIOS.items():
                out = render_configs.render_scenario(overrides)
                for name in outputs:
                    keys = set(tomllib.loads(out[name]))
                    self.assertTrue(keys <= fields, f"{scenario}/{name}: unknown fields {keys - fields}")

    def test_replicated_prefixes_end_at_the_cluster_boundary(self) -> None:
        loc = locals_of(self.doc)
        self.assertEqual(loc["primary_cluster_prefix"], '"${module.primary_bucket.format_root}/${var.primary_cluster_id}/"')
        self.assertEqual(loc["dr_cluster_prefix"], '"${module.dr_bucket.format_root}/${var.dr_cluster_id}/"')

    def test_two_regions_with_provider_aliases(self) -> None:
        providers = [p['"aws"'] for p in self.doc["provider"]]
        self.assertEqual(sorted(decode_literal(p["alias"]) for p in providers), ["dr", "primary"])
        mods = blocks(self.doc, "module")
        for name, body in mods.items():
            with self.subTest(module=name):
                self.assertIn(body["providers"], ({"aws": "${aws.primary}"}, {"aws": "${aws.dr}"}))


# --------------------------------------------------------------- renderer


class Renderer(unittest.TestCase):
    def test_like_templatefile(self) -> None:
        self.assertEqual(render("a = ${x}\n", {"x": "v"}), "a = v\n")
        self.assertEqual(render("n = ${n}", {"n": 1000}), "n = 1000")
        self.assertEqual(render("n = ${n}", {"n": 1000.0}), "n = 1000")
        self.assertEqual(render("b = ${b}", {"b": True}), "b = true")
        self.assertEqual(render("l = ${jsonencode(l)}", {"l": ["a", "b"]}), 'l = ["a","b"]')
        self.assertEqual(render("lit = $${x} %%{y}", {}), "lit = ${x} %{y}")
        self.assertEqual(terraform_jsonencode("<a&b>\u2028"), '"\\u003ca\\u0026b\\u003e\\u2028"')
        self.assertEqual(terraform_jsonencode({"b": 1, "a": [True, None]}), '{"a":[true,null],"b":1}')

    def test_refuses_what_terraform_refuses_or_we_do_not_support(self) -> None:
        with self.assertRaises(TemplateError):
            render("${missing}", {})
        with self.assertRaises(TemplateError):
            render("${l}", {"l": ["a"]})
        with self.assertRaises(TemplateError):
            render("${n}", {"n": None})
        for unsupported in ("%{ if x }y%{ endif }", "${upper(x)}", "${~ x}", "${x.y}"):
            with self.subTest(template=unsupported), self.assertRaises(TemplateError):
                render(unsupported, {"x": "v"})


if __name__ == "__main__":
    unittest.main()
