"""A small, strict subset of Terraform, for checks that cannot run Terraform.

No provider is reachable where CI runs, so `terraform validate`/`plan` and
`terraform console` are out of reach. What these tests need is narrow:

- read .tf files (python-hcl2) and decode HCL string literals;
- evaluate the few expression shapes the example's template-variable maps
  and the policy documents use (references, indexing, quoted templates,
  `[for x in LIST : "template"]`);
- render `templatefile()` templates that use only `${name}` and
  `${jsonencode(name)}`, the way Terraform does.

Anything outside that subset raises `Unsupported`, so a change to the
Terraform that these helpers do not understand fails loudly instead of
being checked against a guess.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import hcl2


class Unsupported(Exception):
    """An expression or template construct outside the supported subset."""


# ---------------------------------------------------------------- HCL files


def load_dir(path: Path) -> dict[str, list]:
    """Parses every .tf file of a directory and merges their top-level blocks."""
    merged: dict[str, list] = {}
    files = sorted(path.glob("*.tf"))
    if not files:
        raise FileNotFoundError(f"no .tf files in {path}")
    for f in files:
        with f.open() as fh:
            doc = hcl2.load(fh)
        for key, blocks in doc.items():
            if key.startswith("__"):
                continue
            merged.setdefault(key, []).extend(blocks)
    return merged


def label(s: str) -> str:
    """A block label as python-hcl2 returns it ('"name"') without quotes."""
    return s[1:-1] if len(s) >= 2 and s[0] == '"' and s[-1] == '"' else s


def blocks(doc: dict, kind: str, type_: str | None = None) -> dict[str, dict]:
    """`resource`/`data` blocks of one type by name, or `variable`/`output`/
    `module` blocks by name."""
    out: dict[str, dict] = {}
    for entry in doc.get(kind, []):
        for first, body in entry.items():
            if type_ is None:
                out[label(first)] = body
            elif label(first) == type_:
                for name, inner in body.items():
                    out[label(name)] = inner
    return out


def locals_of(doc: dict) -> dict[str, Any]:
    """All `locals` of a merged document."""
    out: dict[str, Any] = {}
    for entry in doc.get("locals", []):
        for k, v in entry.items():
            if not k.startswith("__"):
                out[k] = v
    return out


_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\"}


def decode_literal(raw: str) -> str:
    """Decodes an HCL quoted string without interpolations ('"a\\\\b"' -> 'a\\b').

    Raises Unsupported if it contains an interpolation or directive."""
    if not (len(raw) >= 2 and raw[0] == '"' and raw[-1] == '"'):
        raise Unsupported(f"not a quoted string literal: {raw!r}")
    body, out, i = raw[1:-1], [], 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            nxt = body[i + 1]
            if nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
                i += 2
            elif nxt == "u":
                out.append(chr(int(body[i + 2 : i + 6], 16)))
                i += 6
            elif nxt == "U":
                out.append(chr(int(body[i + 2 : i + 10], 16)))
                i += 10
            else:
                raise Unsupported(f"escape \\{nxt} in {raw!r}")
        elif body.startswith("$${", i) or body.startswith("%%{", i):
            out.append(body[i] + "{")
            i += 3
        elif body.startswith("${", i) or body.startswith("%{", i):
            raise Unsupported(f"interpolation in what should be a literal: {raw!r}")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def literal(value: Any) -> Any:
    """A python-hcl2 value that is a literal (string, number, bool, null,
    list or map of literals), decoded."""
    if isinstance(value, str):
        return decode_literal(value)
    if isinstance(value, list):
        return [literal(v) for v in value]
    if isinstance(value, dict):
        return {label(k): literal(v) for k, v in value.items() if not k.startswith("__")}
    return value


# -------------------------------------------------------------- expressions

_REF = r"[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z_][A-Za-z0-9_-]*)*"
_REF_RE = re.compile(rf"^({_REF})((?:\[\d+\])*)$")
_FOR_RE = re.compile(rf'^\[for ([A-Za-z_][A-Za-z0-9_]*) in ({_REF}) : "(.*)"\]$', re.S)


def _lookup(ref: str, env: dict[str, Any]) -> Any:
    m = _REF_RE.match(ref.strip())
    if not m:
        raise Unsupported(f"expression {ref!r}")
    name, indexes = m.group(1), m.group(2)
    if name not in env:
        raise Unsupported(f"unknown reference {name!r}")
    value = env[name]
    for idx in re.findall(r"\[(\d+)\]", indexes):
        value = value[int(idx)]
    return value


def _template(body: str, env: dict[str, Any]) -> str:
    """Substitutes ${ref} in the body of a quoted template (no directives)."""
    out, i = [], 0
    while i < len(body):
        if body.startswith("$${", i):
            out.append("${")
            i += 3
        elif body.startswith("${", i):
            end = body.index("}", i)
            v = _lookup(body[i + 2 : end], env)
            if not isinstance(v, str):
                raise Unsupported(f"non-string {v!r} interpolated in {body!r}")
            out.append(v)
            i = end + 1
        elif body.startswith("%{", i):
            raise Unsupported(f"template directive in {body!r}")
        elif body[i] == "\\":
            out.append(decode_literal('"' + body[i : i + 2] + '"'))
            i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


def evaluate(value: Any, env: dict[str, Any]) -> Any:
    """Evaluates a python-hcl2 value in `env` (names like 'var.x',
    'local.y', 'module.m.out' to values). Supported: literals, '${ref}',
    '${ref[0]}', quoted templates with ${ref}, '[for x in ref : "tpl"]',
    and lists and maps of those."""
    if isinstance(value, list):
        return [evaluate(v, env) for v in value]
    if isinstance(value, dict):
        return {label(k): evaluate(v, env) for k, v in value.items() if not k.startswith("__")}
    if not isinstance(value, str):
        return value
    if value.startswith('"') and value.endswith('"'):
        return _template(value[1:-1], env)
    if value.startswith("${") and value.endswith("}"):
        inner = value[2:-1].strip()
        m = _FOR_RE.match(inner)
        if m:
            var, src, tpl = m.groups()
            return [_template(tpl, {**env, var: item}) for item in _lookup(src, env)]
        return _lookup(inner, env)
    raise Unsupported(f"value {value!r}")


# ---------------------------------------------------------------- templates


class TemplateError(Exception):
    """What Terraform's templatefile() would refuse."""


def terraform_jsonencode(value: Any) -> str:
    """jsonencode() as Terraform prints it: compact, object keys sorted,
    '<', '>', '&', U+2028 and U+2029 escaped (Go's encoding/json), whole
    numbers without a fraction."""

    def norm(v: Any) -> Any:
        if isinstance(v, float) and v.is_integer():
            return int(v)
        if isinstance(v, list):
            return [norm(x) for x in v]
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        return v

    text = json.dumps(norm(value), ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                    ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


def _to_template_string(name: str, v: Any) -> str:
    if v is None:
        raise TemplateError(f"{name}: null cannot be interpolated")
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else repr(v)
    if isinstance(v, str):
        return v
    raise TemplateError(f"{name}: a {type(v).__name__} cannot be interpolated; use jsonencode({name})")


_INTERP_RE = re.compile(r"^(?:jsonencode\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)|([A-Za-z_][A-Za-z0-9_]*))$")


def _interpolations(template: str):
    """Yields (start, end, kind, name) for each ${...}; rejects directives,
    strip markers and any other expression."""
    i = 0
    while i < len(template):
        if template.startswith("$${", i) or template.startswith("%%{", i):
            yield (i, i + 3, "escape", template[i] + "{")
            i += 3
        elif template.startswith("%{", i):
            raise TemplateError(f"template directive at offset {i}: not supported by this renderer; keep templates to ${{name}} and ${{jsonencode(name)}}")
        elif template.startswith("${", i):
            end = template.find("}", i)
            if end < 0:
                raise TemplateError(f"unterminated interpolation at offset {i}")
            expr = template[i + 2 : end].strip()
            m = _INTERP_RE.match(expr)
            if not m:
                raise TemplateError(f"unsupported expression ${{{expr}}}: use ${{name}} or ${{jsonencode(name)}}")
            if m.group(1):
                yield (i, end + 1, "json", m.group(1))
            else:
                yield (i, end + 1, "plain", m.group(2))
            i = end + 1
        else:
            i += 1


def referenced_names(template: str) -> set[str]:
    """The template variables a template uses."""
    return {name for _, _, kind, name in _interpolations(template) if kind != "escape"}


def render(template: str, variables: dict[str, Any]) -> str:
    """templatefile(path, variables) for the supported subset."""
    out, pos = [], 0
    for start, end, kind, name in _interpolations(template):
        out.append(template[pos:start])
        if kind == "escape":
            out.append(name)
        else:
            if name not in variables:
                raise TemplateError(f"vars map does not contain key {name!r}")
            v = variables[name]
            out.append(terraform_jsonencode(v) if kind == "json" else _to_template_string(name, v))
        pos = end
    out.append(template[pos:])
    return "".join(out)
