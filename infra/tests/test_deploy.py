"""Properties of infra/deploy and .checkov.yaml that no scanner checks for us.

Needs PyYAML (checkov's virtualenv has it; infra/check.sh runs this with
infra/.venv-tf/bin/python):

    infra/.venv-tf/bin/python -m unittest discover -s infra/tests -p 'test_deploy.py' -v
"""

from __future__ import annotations

import re
import tomllib
import unittest
from pathlib import Path

import yaml

INFRA = Path(__file__).resolve().parent.parent
REPO = INFRA.parent
DEPLOY = INFRA / "deploy"
BROKER_LOG_DIR = "/var/lib/kafka/data"


def unit(path: Path) -> dict[str, list[str]]:
    """A systemd unit's [Service] settings; repeated keys keep every value."""
    section, out = None, {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]":
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


class Systemd(unittest.TestCase):
    shipper = unit(DEPLOY / "systemd" / "segmirror-shipper.service")
    applier = unit(DEPLOY / "systemd" / "segmirror-applier.service")

    def test_both_hardened(self) -> None:
        for name, u in (("shipper", self.shipper), ("applier", self.applier)):
            with self.subTest(unit=name):
                for key, value in {
                    "ProtectSystem": "strict", "NoNewPrivileges": "yes", "ProtectHome": "yes",
                    "PrivateTmp": "yes", "PrivateDevices": "yes", "RestrictSUIDSGID": "yes",
                    "MemoryDenyWriteExecute": "yes", "LockPersonality": "yes",
                    "SystemCallArchitectures": "native", "CapabilityBoundingSet": "",
                }.items():
                    self.assertEqual(u.get(key), [value], key)
                self.assertIn("@system-service", u["SystemCallFilter"])
                self.assertNotIn("root", u.get("User", []))
                self.assertTrue(u.get("DynamicUser") == ["yes"] or u.get("User"), "runs as root")
                exe = f"/usr/local/bin/{name}"
                self.assertEqual(u["ExecStart"], [f"{exe} run --config /etc/segmirror/{name}.toml"])
                self.assertEqual(u["ExecStartPre"], [f"{exe} config check --config /etc/segmirror/{name}.toml"])

    def test_shipper_reads_the_broker_log_dir_only(self) -> None:
        self.assertEqual(self.shipper.get("DynamicUser"), ["yes"])
        self.assertIn(BROKER_LOG_DIR, " ".join(self.shipper["ReadOnlyPaths"]).split())
        self.assertNotIn("ReadWritePaths", self.shipper)
        self.assertNotIn("StateDirectory", self.shipper)

    def test_applier_writes_only_the_mirror_log_dir(self) -> None:
        self.assertEqual(self.applier.get("ReadWritePaths"), [BROKER_LOG_DIR])
        self.assertEqual(self.applier.get("User"), ["kafka"])


class Kubernetes(unittest.TestCase):
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "kafka-with-shipper-sidecar.yaml").read_text()))

    def kind(self, kind: str) -> dict:
        (found,) = [d for d in self.docs if d and d["kind"] == kind]
        return found

    def test_shipper_sidecar_mounts_the_broker_log_dir_read_only(self) -> None:
        pod = self.kind("StatefulSet")["spec"]["template"]["spec"]
        containers = pod.get("containers", []) + pod.get("initContainers", [])
        (shipper,) = [c for c in containers if c["name"] == "segmirror-shipper"]
        (broker,) = [c for c in pod["containers"] if c["name"] == "kafka"]
        if shipper in pod.get("initContainers", []):
            self.assertEqual(shipper.get("restartPolicy"), "Always", "an init container that is not a sidecar")
        broker_mount = [m for m in broker["volumeMounts"] if m["mountPath"] == BROKER_LOG_DIR]
        self.assertEqual(len(broker_mount), 1)
        volume = broker_mount[0]["name"]
        mounts = [m for m in shipper["volumeMounts"] if m["name"] == volume]
        self.assertEqual(len(mounts), 1)
        self.assertEqual(mounts[0]["mountPath"], BROKER_LOG_DIR)
        self.assertIs(mounts[0].get("readOnly"), True, "the shipper must mount the log dir read-only")
        for m in shipper["volumeMounts"]:
            self.assertIs(m.get("readOnly"), True, m["name"])
        self.assertNotIn("readinessProbe", shipper, "a sidecar's readiness would gate the broker's")

        sc = shipper["securityContext"]
        self.assertIs(sc["runAsNonRoot"], True)
        self.assertGreaterEqual(sc["runAsUser"], 10000)
        self.assertIs(sc["readOnlyRootFilesystem"], True)
        self.assertIs(sc["allowPrivilegeEscalation"], False)
        self.assertEqual(sc["capabilities"]["drop"], ["ALL"])
        self.assertIn("fsGroup", pod["securityContext"], "the shipper needs the broker's group to read")
        self.assertIn("limits", shipper["resources"])

    def test_configmap_is_a_shipper_config_for_the_mounted_dir(self) -> None:
        cm = self.kind("ConfigMap")
        cfg = tomllib.loads(cm["data"]["shipper.toml"])
        self.assertEqual(cfg["log_dirs"], [BROKER_LOG_DIR])
        tpl = (INFRA / "terraform/examples/two-region-dr/templates/shipper.toml.tftpl").read_text()
        template_keys = set(re.findall(r"^(\w+) = ", tpl, re.M))
        self.assertEqual(set(cfg), template_keys, "ConfigMap and Terraform template disagree on keys")


class BackfillJob(unittest.TestCase):
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "backfill-export-job.yaml").read_text()))

    def test_an_indexed_job_whose_count_is_its_completions(self) -> None:
        (job,) = [d for d in self.docs if d and d["kind"] == "Job"]
        spec = job["spec"]
        self.assertEqual(spec["completionMode"], "Indexed", "JOB_COMPLETION_INDEX is set only in Indexed Jobs")
        (c,) = spec["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in c["env"]}
        self.assertEqual(env["JOB_COMPLETION_COUNT"], str(spec["completions"]))
        self.assertEqual(c["command"][:2], ["/usr/local/bin/backfill", "export"])
        self.assertNotIn("--shard", c["command"], "the shard comes from the Job's variables")
        sc = c["securityContext"]
        self.assertIs(sc["runAsNonRoot"], True)
        self.assertIs(sc["readOnlyRootFilesystem"], True)
        self.assertEqual(sc["capabilities"]["drop"], ["ALL"])
        self.assertIn("limits", c["resources"])


class Container(unittest.TestCase):
    text = (DEPLOY / "container" / "Dockerfile").read_text()

    def test_multi_stage_non_root(self) -> None:
        froms = re.findall(r"^FROM\s+(\S+)", self.text, re.M)
        self.assertGreaterEqual(len(froms), 2, "multi-stage build")
        self.assertTrue(froms[0].startswith("docker.io/library/rust:"), froms[0])
        self.assertTrue(re.match(r"(gcr\.io/distroless/|docker\.io/library/debian:.*slim)", froms[-1]), froms[-1])
        self.assertIn("cargo build --release --locked -p shipper -p applier", self.text)
        users = re.findall(r"^USER\s+(\S+)", self.text, re.M)
        self.assertTrue(users, "no USER")
        self.assertNotIn(users[-1].split(":")[0], ("root", "0"))
        ignore = (DEPLOY / "container" / "Dockerfile.dockerignore").read_text().split()
        self.assertIn("target", ignore)


class Checkov(unittest.TestCase):
    path = REPO / ".checkov.yaml"

    def test_every_skip_has_a_reason(self) -> None:
        lines = self.path.read_text().splitlines()
        cfg = yaml.safe_load(self.path.read_text())
        skips = cfg.get("skip-check", [])
        for check in skips:
            with self.subTest(check=check):
                (idx,) = [i for i, ln in enumerate(lines) if ln.strip() == f"- {check}"]
                reason = []
                j = idx - 1
                while j >= 0 and lines[j].strip().startswith("#"):
                    reason.append(lines[j])
                    j -= 1
                self.assertGreaterEqual(len(" ".join(reason)), 40, "no reason comment above the skip")

    def test_scans_infra_without_the_virtualenvs(self) -> None:
        cfg = yaml.safe_load(self.path.read_text())
        self.assertEqual(cfg["directory"], ["infra"])
        self.assertTrue({"terraform", "kubernetes", "dockerfile"} <= set(cfg["framework"]))
        self.assertTrue(any(".venv-tf" in p for p in cfg["skip-path"]))
        self.assertTrue(any(".venv-hcl" in p for p in cfg["skip-path"]))
        self.assertNotIn("soft-fail", cfg)


def documented_metrics(module: Path) -> set[str]:
    """The metric names of a Rust metrics module's `//! | `name` |` table."""
    return {
        m.group(1)
        for m in re.finditer(r"^//! \| `([a-z_]+)` \|", module.read_text(), re.M)
    }


class Alerts(unittest.TestCase):
    """infra/monitoring: the Prometheus rules name metrics that exist."""

    rules = yaml.safe_load((INFRA / "monitoring" / "segmirror-alerts.yml").read_text())
    metrics = documented_metrics(REPO / "shipper" / "src" / "metrics.rs") | documented_metrics(
        REPO / "applier" / "src" / "metrics.rs"
    )

    def all_rules(self) -> list[dict]:
        return [r for g in self.rules["groups"] for r in g["rules"]]

    def test_every_expression_names_documented_metrics(self) -> None:
        self.assertIn("segmirror_shipper_gap_unacknowledged_offsets", self.metrics)
        for rule in self.all_rules():
            with self.subTest(alert=rule["alert"]):
                names = re.findall(r"segmirror_[a-z_]+", rule["expr"])
                self.assertTrue(names, "no segmirror metric in the expression")
                for name in names:
                    self.assertIn(name, self.metrics, "not a documented metric")
                self.assertIn(rule["labels"]["severity"], {"critical", "warning"})
                self.assertTrue(rule["annotations"]["summary"])

    def test_an_unacknowledged_gap_alerts_on_both_sides_at_once(self) -> None:
        by_expr = {r["expr"]: r for r in self.all_rules()}
        for side in ("shipper", "applier"):
            with self.subTest(side=side):
                rule = by_expr[f"segmirror_{side}_gap_unacknowledged_offsets > 0"]
                self.assertEqual(rule["labels"]["severity"], "critical")
                self.assertNotIn("for", rule, "a gap never heals: no waiting period")
                self.assertIn(f"{side} gaps ack", rule["annotations"]["description"])


if __name__ == "__main__":
    unittest.main()
