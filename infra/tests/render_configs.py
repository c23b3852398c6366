"""Renders the two-region-dr example's configuration outputs the way
`terraform apply` would, without Terraform.

For every output of the example that calls
`templatefile("${path.module}/templates/X.tftpl", local.M)`, it evaluates the
map `local.M` from the example's variable defaults, `terraform.tfvars.example`
and per-scenario overrides (the module outputs it references are computed by
Python twins of the bucket module's locals, pinned by test_terraform.py),
renders the template and checks the result is TOML.

    python render_configs.py OUTDIR     # writes OUTDIR/<scenario>.<output>.toml

infra/check.sh then runs `shipper config check` / `applier config check` on
the files.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import hcl2

from tfsubset import Unsupported, blocks, evaluate, literal, load_dir, locals_of, render

INFRA = Path(__file__).resolve().parent.parent
EXAMPLE = INFRA / "terraform" / "examples" / "two-region-dr"

# Scenarios: terraform.tfvars.example as written, and one that exercises the
# other branch of the bucket URL (no key prefix) and the escaping of
# jsonencode() through each binary's TOML parser.
SCENARIOS: dict[str, dict[str, Any]] = {
    "example": {},
    "edge": {
        "key_prefix": "",
        "primary_log_dirs": ["/data/kafka-1", "/data/kafka-2"],
        "dr_log_dir": "/srv/kafka/mirror",
        "topics": r'^(orders|payments)\.v[0-9]+$',
        "exclude": r'^(tmp|"quoted")-.*',
        "poll_interval_ms": 250,
        "download_concurrency": 16,
        "dr_tiered_topics": ["archive.v1"],
        "primary_tiered_topics": [],
        "applier_metrics_addr": "[::1]:9464",
        "shipper_metrics_addr": "0.0.0.0:9465",
    },
}

_CALL_RE = re.compile(r'templatefile\("\$\{path\.module\}/([^"]+)", local\.([A-Za-z_][A-Za-z0-9_]*)\)')


def bucket_url(bucket_name: str, key_prefix: str) -> str:
    """Python twin of modules/bucket `local.bucket_url`."""
    return f"s3://{bucket_name}" if key_prefix == "" else f"s3://{bucket_name}/{key_prefix}"


def kms_key_arn_stand_in(region: str) -> str:
    """What `module.<bucket>.kms_key_arn` looks like after apply, for a key
    the module creates (the real ARN is computed by AWS)."""
    return f"arn:aws:kms:{region}:123456789012:key/00000000-0000-0000-0000-000000000000"


def example_variables(overrides: dict[str, Any]) -> dict[str, Any]:
    """The example's input variables: defaults, then the tfvars example,
    then overrides. Fails if a variable without default stays unset."""
    doc = load_dir(EXAMPLE)
    declared = blocks(doc, "variable")
    values: dict[str, Any] = {}
    for name, body in declared.items():
        if "default" in body:
            values[name] = literal(body["default"])
    with (EXAMPLE / "terraform.tfvars.example").open() as fh:
        for k, v in hcl2.load(fh).items():
            if not k.startswith("__"):
                if k not in declared:
                    raise KeyError(f"terraform.tfvars.example sets undeclared variable {k!r}")
                values[k] = literal(v)
    for k, v in overrides.items():
        if k not in declared:
            raise KeyError(f"scenario overrides undeclared variable {k!r}")
        values[k] = v
    missing = sorted(set(declared) - set(values))
    if missing:
        raise KeyError(f"variables without a value: {missing}")
    return values


def template_outputs() -> dict[str, tuple[str, str]]:
    """output name -> (template path relative to the example, locals map
    name), for every output that calls templatefile()."""
    doc = load_dir(EXAMPLE)
    found: dict[str, tuple[str, str]] = {}
    for name, body in blocks(doc, "output").items():
        value = body.get("value")
        if isinstance(value, str) and "templatefile(" in value:
            calls = _CALL_RE.findall(value)
            if len(calls) != 1:
                raise Unsupported(f"output {name}: expected one templatefile(\"${{path.module}}/...\", local.X) call, got {value!r}")
            found[name] = calls[0]
    return found


def render_scenario(overrides: dict[str, Any]) -> dict[str, str]:
    """output name -> rendered text."""
    values = example_variables(overrides)
    env: dict[str, Any] = {f"var.{k}": v for k, v in values.items()}
    env["module.primary_bucket.bucket_url"] = bucket_url(values["primary_bucket_name"], values["key_prefix"])
    env["module.dr_bucket.bucket_url"] = bucket_url(values["dr_bucket_name"], values["key_prefix"])
    # The keys modules/bucket creates: known only after apply; a stand-in
    # of the same shape (doctor_expectations names them).
    env["module.primary_bucket.kms_key_arn"] = kms_key_arn_stand_in(values["primary_region"])
    env["module.dr_bucket.kms_key_arn"] = kms_key_arn_stand_in(values["dr_region"])
    local_maps = locals_of(load_dir(EXAMPLE))
    out: dict[str, str] = {}
    for output, (template, local_name) in sorted(template_outputs().items()):
        variables = evaluate(local_maps[local_name], env)
        text = render((EXAMPLE / template).read_text(), variables)
        try:
            tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise AssertionError(f"output {output} does not render to valid TOML: {e}\n{text}") from e
        out[output] = text
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    outdir = Path(argv[1])
    outdir.mkdir(parents=True, exist_ok=True)
    for scenario, overrides in SCENARIOS.items():
        for output, text in render_scenario(overrides).items():
            path = outdir / f"{scenario}.{output.removesuffix('_toml')}.toml"
            path.write_text(text)
            print(f"rendered {path.name} (output {output}, scenario {scenario})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
