"""vLLM's Prometheus metrics as its source declares them, read statically (never imported).

vLLM declares each metric as a call to prometheus_client's class or a wrapper of it
(``self._histogram_cls(name="vllm:…", labelnames=…, buckets=…)``). This walks every module of a
vLLM tree, finds those calls, and evaluates their name, label names and buckets from what the
source spells out: literals, local and ``self.`` assignments, list concatenation, a
comprehension over a literal list of names, a parameter through the calls that pass it, and
vLLM's bucket helpers (``histogram_buckets(family)``, ``build_1_2_5_buckets(max_model_len)``).
What it cannot evaluate it says (``"unresolved"``), so a fixture never hides a guess::

    python -m tests.contracts.vllm_releases.extract 0.34.0       # downloads the wheel from PyPI
    python -m tests.contracts.vllm_releases.extract 0.32.0 --tree .venv/lib/python3.11/site-packages

Each run writes ``tests/contracts/vllm_releases/vllm-<release>.json``, which the contract test
reads offline. Histograms whose edges follow the model's context length record the rule
(:data:`UP_TO_MAX_MODEL_LEN`), not numbers.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PREFIX = "vllm:"
UNRESOLVED = "unresolved"
DYNAMIC = "dynamic"  # label names vLLM takes from a config object at run time
UP_TO_MAX_MODEL_LEN = "1-2-5 up to max_model_len"
BUCKETS_MODULE = "vllm/v1/metrics/buckets.py"
KINDS = ("histogram", "counter", "gauge")  # in the order a callee's name is matched


class Unresolved(Exception):
    pass


@dataclass
class Scope:
    """The assignments a function body makes (every one, in order), and its parameters."""

    module: Path
    function: ast.FunctionDef | ast.AsyncFunctionDef | None
    owner: str | None  # the class a method belongs to
    names: dict[str, list[ast.expr]] = field(default_factory=dict)
    params: list[str] = field(default_factory=list)


@dataclass
class Tree:
    root: Path
    modules: dict[Path, ast.Module] = field(default_factory=dict)
    # class name -> self.<attribute> -> assigned values (any method of the class)
    attributes: dict[str, dict[str, list[ast.expr]]] = field(default_factory=dict)
    # every call in the tree, with the scope it is made in (for parameters passed down)
    calls: list[tuple[ast.Call, Scope]] = field(default_factory=list)
    scopes: list[Scope] = field(default_factory=list)
    bucket_families: dict[str, Any] = field(default_factory=dict)
    # a class attribute naming a class (``_spec_decoding_cls = SpecDecodingProm``) -> that class
    aliases: dict[str, str] = field(default_factory=dict)


def _functions(module: ast.Module) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef,
                                                     str | None]]:
    for node in module.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node, None
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    yield item, node.name


def _assignments(body: ast.AST) -> Iterator[tuple[ast.expr, ast.expr]]:
    for node in ast.walk(body):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            yield node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            yield node.target, node.value


def load(root: Path) -> Tree:
    tree = Tree(root)
    for path in sorted((root / "vllm").rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        # Only modules that name a metric (their callers included: a metric's label names are
        # passed down from a module that names one), and the bucket defaults.
        if PREFIX not in text and path != root / BUCKETS_MODULE:
            continue
        try:
            module = ast.parse(text, str(path))
        except SyntaxError:
            continue
        tree.modules[path] = module
        for node in ast.walk(module):
            if isinstance(node, ast.ClassDef):
                tree.aliases.update({t.id: v.id for t, v in _assignments(ast.Module(
                    body=[n for n in node.body if isinstance(n, ast.Assign | ast.AnnAssign)],
                    type_ignores=[])) if isinstance(t, ast.Name) and isinstance(v, ast.Name)})
        top = Scope(path, None, None)
        for target, value in _assignments(ast.Module(
                body=[n for n in module.body if isinstance(n, ast.Assign | ast.AnnAssign)],
                type_ignores=[])):
            if isinstance(target, ast.Name):
                top.names.setdefault(target.id, []).append(value)
        for function, owner in _functions(module):
            scope = Scope(path, function, owner, dict(top.names),
                          [a.arg for a in (*function.args.posonlyargs, *function.args.args,
                                           *function.args.kwonlyargs)])
            for target, value in _assignments(function):
                if isinstance(target, ast.Name):
                    scope.names.setdefault(target.id, []).append(value)
                elif (isinstance(target, ast.Attribute) and owner
                      and isinstance(target.value, ast.Name) and target.value.id == "self"):
                    tree.attributes.setdefault(owner, {}).setdefault(target.attr, []).append(value)
            tree.scopes.append(scope)
            tree.calls += [(n, scope) for n in ast.walk(function) if isinstance(n, ast.Call)]
    tree.bucket_families = _bucket_families(tree)
    return tree


def _bucket_families(tree: Tree) -> dict[str, Any]:
    """vLLM >= 0.32's ``_STATIC_FAMILY_DEFAULTS`` (family -> edges); older trees have none."""
    module = tree.modules.get(tree.root / BUCKETS_MODULE)
    if module is None:
        return {}
    scope = Scope(tree.root / BUCKETS_MODULE, None, None)
    for target, value in _assignments(module):
        if isinstance(target, ast.Name):
            scope.names.setdefault(target.id, []).append(value)
    families = evaluate(tree, scope.names["_STATIC_FAMILY_DEFAULTS"][-1], scope)
    return {**families, "request_tokens": UP_TO_MAX_MODEL_LEN}


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _argument(call: ast.Call, keyword: str, position: int | None) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    if position is not None and len(call.args) > position:
        return call.args[position]
    return None


def _parameter(tree: Tree, scope: Scope, name: str, depth: int) -> Any:
    """A parameter's value, from the first call of its function that passes one we can read."""
    assert scope.function is not None
    target = scope.owner if scope.function.name == "__init__" else scope.function.name
    index = scope.params.index(name) - (1 if scope.owner else 0)
    for call, caller in tree.calls:
        called = _callee(call)
        if target not in (called, tree.aliases.get(called)):
            continue
        argument = _argument(call, name, index)
        if argument is None:
            continue
        try:
            return evaluate(tree, argument, caller, depth + 1)
        except Unresolved:
            continue
    raise Unresolved(name)


def evaluate(tree: Tree, node: ast.expr, scope: Scope, depth: int = 0) -> Any:
    if depth > 12:
        raise Unresolved("too deep")
    match node:
        case ast.Constant(value=value):
            return value
        case ast.List(elts=items) | ast.Tuple(elts=items) | ast.Set(elts=items):
            return [evaluate(tree, item, scope, depth + 1) for item in items]
        case ast.Dict(keys=keys, values=values):
            return {evaluate(tree, k, scope, depth + 1): evaluate(tree, v, scope, depth + 1)
                    for k, v in zip(keys, values, strict=True) if k is not None}
        case ast.UnaryOp(op=ast.USub(), operand=operand):
            return -evaluate(tree, operand, scope, depth + 1)
        case ast.BinOp(left=left, op=ast.Add(), right=right):
            return evaluate(tree, left, scope, depth + 1) + evaluate(tree, right, scope, depth + 1)
        case ast.Name(id=name):
            for assigned in reversed(scope.names.get(name, [])):
                try:
                    return evaluate(tree, assigned, scope, depth + 1)
                except Unresolved:
                    continue
            if scope.function is not None and name in scope.params:
                return _parameter(tree, scope, name, depth)
            raise Unresolved(name)
        case ast.Attribute(value=ast.Name(id="self"), attr=attr) if scope.owner:
            for assigned in reversed(tree.attributes.get(scope.owner, {}).get(attr, [])):
                try:
                    return evaluate(tree, assigned, scope, depth + 1)
                except Unresolved:
                    continue
            raise Unresolved(f"self.{attr}")
        case ast.Call(func=func, args=args):
            called = _callee(node)
            if called in ("list", "tuple", "sorted") and len(args) == 1:
                return list(evaluate(tree, args[0], scope, depth + 1))
            if called == "keys" and isinstance(func, ast.Attribute):
                return DYNAMIC
            if called == "build_1_2_5_buckets":
                return UP_TO_MAX_MODEL_LEN
            if called == "histogram_buckets" and args:
                family = evaluate(tree, args[0], scope, depth + 1)
                if family in tree.bucket_families:
                    return tree.bucket_families[family]
    raise Unresolved(ast.unparse(node))


def _kind(call: ast.Call) -> str | None:
    callee = _callee(call).lower()
    return next((kind for kind in KINDS if kind in callee), None)


def _names(tree: Tree, call: ast.Call, scope: Scope) -> list[str]:
    """The metric names a declaring call is made with: a constant, or each name of the literal
    list a comprehension around it walks (``for name, doc in counter_specs``)."""
    node = _argument(call, "name", 0)
    if node is None:
        return []
    try:
        value = evaluate(tree, node, scope)
        return [value] if isinstance(value, str) else []
    except Unresolved:
        pass
    if not isinstance(node, ast.Name) or scope.function is None:
        return []
    found: list[str] = []
    for comp in ast.walk(scope.function):
        if not isinstance(comp, ast.ListComp | ast.GeneratorExp | ast.DictComp | ast.SetComp):
            continue
        if not any(n is call for n in ast.walk(comp)):
            continue
        for generator in comp.generators:
            target, source = generator.target, generator.iter
            if not (isinstance(target, ast.Tuple) and isinstance(source, ast.Name)):
                continue
            slot = [i for i, t in enumerate(target.elts)
                    if isinstance(t, ast.Name) and t.id == node.id]
            for value in scope.names.get(source.id, []):
                try:
                    rows = evaluate(tree, value, scope)
                except Unresolved:
                    continue
                found += [row[slot[0]] for row in rows if slot]
    return found


def _read(tree: Tree, call: ast.Call, scope: Scope, keyword: str) -> Any:
    node = _argument(call, keyword, None)
    if node is None:
        return []
    try:
        return evaluate(tree, node, scope)
    except Unresolved:
        return UNRESOLVED


def metrics(root: Path) -> dict[str, dict[str, Any]]:
    """Every ``vllm:*`` metric declared under ``root/vllm``: type, label names (sorted) and, for
    a histogram, bucket edges (or the rule they follow)."""
    tree = load(root)
    found: dict[str, dict[str, Any]] = {}
    for call, scope in tree.calls:
        kind = _kind(call)
        if kind is None:
            continue
        for name in _names(tree, call, scope):
            if not name.startswith(PREFIX):
                continue
            labels = _read(tree, call, scope, "labelnames")
            entry: dict[str, Any] = {
                "type": kind,
                "labels": sorted(labels) if isinstance(labels, list) else labels,
                "defined_in": scope.module.relative_to(root).as_posix(),
            }
            if kind == "histogram":
                buckets = _read(tree, call, scope, "buckets")
                entry["buckets"] = ([float(b) for b in buckets] if isinstance(buckets, list)
                                    else buckets)
            found.setdefault(name, entry)
    return dict(sorted(found.items()))


def download(release: str, folder: Path) -> Path:
    """vLLM's wheel for ``release`` from PyPI (the Linux x86-64 one; its Python is the same)."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--only-binary", ":all:", "--platform", "manylinux_2_28_x86_64",
                    "--python-version", "3.12", "--dest", str(folder), f"vllm=={release}"],
                   check=True)
    (wheel,) = folder.glob(f"vllm-{release}-*.whl")
    return wheel


def unpack(wheel: Path, folder: Path) -> Path:
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(folder, [n for n in archive.namelist()
                                    if n.startswith("vllm/") and n.endswith(".py")])
    return folder


def fixture(release: str, source: str, found: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"release": release, "source": source, "read": "statically, by "
            "tests/contracts/vllm_releases/extract.py", "metrics": found}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("release", help="vLLM release, e.g. 0.34.0")
    parser.add_argument("--tree", type=Path, help="a folder holding vllm/ (an installed "
                        "build) instead of downloading the wheel")
    parser.add_argument("--wheel", type=Path, help="a wheel already downloaded")
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        if args.tree is not None:
            root, source = args.tree, f"installed tree of vllm {args.release}"
        else:
            wheel = args.wheel or download(args.release, work)
            root, source = unpack(wheel, work / "tree"), f"wheel {wheel.name} from PyPI"
        found = metrics(root)
    if not found:
        print(f"no vllm:* metric found under {root}", file=sys.stderr)
        return 1
    out = args.out / f"vllm-{args.release}.json"
    out.write_text(json.dumps(fixture(args.release, source, found), indent=1) + "\n")
    unresolved = [name for name, m in found.items() if UNRESOLVED in (m["labels"],
                                                                       m.get("buckets"))]
    print(f"{out}: {len(found)} metrics" + (f"; unresolved: {', '.join(unresolved)}"
                                            if unresolved else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
