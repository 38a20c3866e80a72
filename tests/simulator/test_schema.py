"""Our schema (labgov/runpod/schema/runpod_v2.json) against Runpod's published OpenAPI.

Every field our schema names must exist in Runpod's with the same type(s), nullability and
enum values; a field may be required in ours only if it is required in theirs; a constraint we
state (minimum, pattern, ...) must be theirs too. Runs only when the OpenAPI file is present.
"""

from dataclasses import dataclass, field

import pytest

from labgov.runpod.schema import errors, load_schema, validate
from tests.runpod.openapi import SKIP_REASON, load_openapi

CONSTRAINTS = ("minimum", "maximum", "minLength", "minItems", "maxItems", "pattern", "format")


@dataclass
class Shape:
    """A schema node with allOf/anyOf/oneOf and $ref folded away."""

    types: set[str] = field(default_factory=set)
    enum: set | None = None
    properties: dict[str, list[dict]] = field(default_factory=dict)
    required: set[str] = field(default_factory=set)
    items: list[dict] = field(default_factory=list)
    additional: list[dict] = field(default_factory=list)
    closed: bool = False
    constraints: dict = field(default_factory=dict)


def resolve(doc: dict, node: dict) -> dict:
    while "$ref" in node:
        target = doc
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def shape(doc: dict, node: dict) -> Shape:
    node = resolve(doc, node)
    out = Shape()
    declared = node.get("type")
    if declared is not None:
        out.types = set(declared) if isinstance(declared, list) else {declared}
    if "enum" in node:
        out.enum = set(node["enum"])
    for name, sub in node.get("properties", {}).items():
        out.properties.setdefault(name, []).append(sub)
    out.required |= set(node.get("required", []))
    if "items" in node:
        out.items.append(node["items"])
    extra = node.get("additionalProperties")
    if extra is False or node.get("unevaluatedProperties") is False:
        out.closed = True
    elif isinstance(extra, dict):
        out.additional.append(extra)
    out.constraints = {k: node[k] for k in CONSTRAINTS if k in node}
    for sub in node.get("allOf", []):
        merge_all(out, shape(doc, sub))
    branches = node.get("anyOf", []) + node.get("oneOf", [])
    if branches:
        merge_any(out, [shape(doc, sub) for sub in branches])
    return out


def merge_all(out: Shape, part: Shape) -> None:
    if part.types:
        out.types = out.types & part.types if out.types else set(part.types)
    if part.enum is not None:
        out.enum = part.enum if out.enum is None else out.enum & part.enum
    for name, subs in part.properties.items():
        out.properties.setdefault(name, []).extend(subs)
    out.required |= part.required
    out.items += part.items
    out.additional += part.additional
    out.closed = out.closed or part.closed
    out.constraints = {**part.constraints, **out.constraints}


def merge_any(out: Shape, parts: list[Shape]) -> None:
    out.types |= set().union(*(p.types for p in parts))
    enums = [p.enum for p in parts if "null" not in p.types]
    if enums and all(e is not None for e in enums):
        out.enum = set().union(*enums)
    objects = [p for p in parts if "object" in p.types or p.properties]
    for p in objects:
        for name, subs in p.properties.items():
            out.properties.setdefault(name, []).extend(subs)
    if objects:
        out.required |= set.intersection(*(p.required for p in objects))
    for p in parts:
        out.items += p.items
        out.additional += p.additional


def shape_of_all(doc: dict, nodes: list[dict]) -> Shape:
    return shape(doc, {"allOf": nodes})


def disagreements(ours: dict, theirs: dict, o_nodes, t_nodes, path: str, seen: set) -> list[str]:
    key = (path.count("/"), id(o_nodes[0]), id(t_nodes[0]))
    if key in seen or path.count("/") > 12:
        return []
    seen.add(key)
    o, t = shape_of_all(ours, o_nodes), shape_of_all(theirs, t_nodes)
    found = []
    if o.types and o.types != t.types:
        found.append(f"{path}: type {sorted(o.types)} in ours, {sorted(t.types)} in Runpod's")
    if o.enum is not None and o.enum != t.enum:
        found.append(f"{path}: enum {sorted(o.enum)} in ours, {sorted(t.enum or [])} in Runpod's")
    if not o.required <= t.required:
        extra = sorted(o.required - t.required)
        found.append(f"{path}: {extra} required in ours only")
    if o.closed and not t.closed:
        found.append(f"{path}: closed to other properties in ours only")
    for name, value in o.constraints.items():
        if t.constraints.get(name) != value:
            theirs_value = t.constraints.get(name)
            found.append(f"{path}: {name} {value!r} in ours, {theirs_value!r} in Runpod's")
    for name, subs in o.properties.items():
        if name not in t.properties:
            found.append(f"{path}.{name}: not in Runpod's schema")
            continue
        found += disagreements(ours, theirs, subs, t.properties[name], f"{path}.{name}", seen)
    if o.items:
        if not t.items:
            found.append(f"{path}[]: items described in ours only")
        else:
            found += disagreements(ours, theirs, o.items, t.items, f"{path}[]", seen)
    if o.additional and t.additional:
        found += disagreements(ours, theirs, o.additional, t.additional, f"{path}{{}}", seen)
    return found


@pytest.fixture(scope="module")
def openapi() -> dict:
    doc = load_openapi()
    if doc is None:
        pytest.skip(SKIP_REASON)
    return doc


def test_every_definition_has_a_counterpart_in_runpods_openapi(openapi):
    theirs = openapi["components"]["schemas"]
    missing = sorted(set(load_schema()["$defs"]) - set(theirs))
    assert missing == []


@pytest.mark.parametrize("name", sorted(load_schema()["$defs"]))
def test_definition_agrees_with_runpods_openapi(openapi, name):
    ours = load_schema()
    theirs = openapi
    found = disagreements(
        ours,
        theirs,
        [{"$ref": f"#/$defs/{name}"}],
        [{"$ref": f"#/components/schemas/{name}"}],
        name,
        set(),
    )
    assert found == []


def test_the_agreement_check_notices_a_changed_field(openapi):
    ours = load_schema()
    ours["$defs"]["Pod"]["properties"]["cost"] = {"type": "string"}
    ours["$defs"]["Pod"]["required"].append("cluster")
    ours["$defs"]["PodStatus"]["enum"].append("PAUSED")
    ours["$defs"]["NetworkVolume"]["properties"]["sizeGb"] = {"type": "integer"}
    found = disagreements(
        ours,
        openapi,
        [{"$ref": "#/$defs/Pod"}],
        [{"$ref": "#/components/schemas/Pod"}],
        "Pod",
        set(),
    )
    found += disagreements(
        ours,
        openapi,
        [{"$ref": "#/$defs/NetworkVolume"}],
        [{"$ref": "#/components/schemas/NetworkVolume"}],
        "NetworkVolume",
        set(),
    )
    text = "\n".join(found)
    assert "Pod.cost: type" in text
    assert "['cluster'] required in ours only" in text
    assert "Pod.status: enum" in text
    assert "NetworkVolume.sizeGb: not in Runpod's schema" in text


def test_schema_carries_facts_only_no_prose():
    def walk(node):
        if isinstance(node, dict):
            assert not {"description", "example", "examples", "title"} & set(node) - {"properties"}
            for key, value in node.items():
                if key == "properties":
                    for sub in value.values():
                        walk(sub)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(load_schema()["$defs"])


def test_validate_raises_and_errors_lists_every_problem():
    validate("ErrorResponse", {"title": "Not Found", "status": 404, "detail": "pod not found"})
    with pytest.raises(Exception, match="required"):
        validate("ErrorResponse", {"title": "Not Found"})
    problems = errors("CreatePodRequest", {"name": "", "bogus": 1})
    assert len(problems) == 3  # empty name, unknown property, no image or templateId
