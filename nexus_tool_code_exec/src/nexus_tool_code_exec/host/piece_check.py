"""The check every tool's piece of the `tools` module passes before it is compiled, and its stub
before the model reads it (runs in the host).

A piece is generated from a tool's metadata, which a third party may write (an MCP server's tool
list): names, descriptions, enums, defaults. The generator escapes all of it (bindings.py), and
this check does not trust that it did. It parses the piece and accepts exactly the shapes the
generator writes, nothing else:

    @attrs.define(kw_only=True, slots=False, repr=False, eq=False)
    class ReadArgs(_Record):
        '''a docstring'''
        path: str
        offset: int | None = None
        first_name: str = attrs.field(default=None, alias='first_name', metadata={'json': 'first-name'})

    ReadLines = list[str]

    def read(args: ReadArgs | None = None, /, **kwargs: Any) -> ReadResult:
        '''a docstring'''
        return _call('read', ReadArgs, args, kwargs, ReadResult)

Annotations are made of the piece's own names, the builtin types, `Any`, `Literal[...]` of
constants, `list[...]`, `dict[...]` and `|`. A field may not take a name that an annotation of its
class uses (its default would bind that name in the class body, and the annotation would read
the default instead: `None | None`). So whatever a tool's metadata holds, the code the child runs
for its piece defines those classes and that function and does nothing else; a piece that fails
is left out of the bindings, and never compiled.
"""

from __future__ import annotations

import ast
import types
from collections.abc import Iterable

#: names an annotation may use besides the piece's own classes and aliases
TYPE_NAMES = frozenset({"str", "int", "float", "bool", "list", "dict", "Any", "Result"})
#: the one decorator a generated class has
DECORATOR = ast.dump(ast.parse("attrs.define(kw_only=True, slots=False, repr=False, eq=False)", mode="eval").body)


class PieceRejected(Exception):
    """A piece (or its stub) is not what the generator means to write: the words say what."""


def _where(node: ast.AST) -> str:
    return f"line {getattr(node, 'lineno', '?')}"


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _literal_value(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
        return isinstance(node, ast.Constant) and type(node.value) is int
    return isinstance(node, ast.Constant) and (node.value is None or type(node.value) in (str, int, bool))


def _type_names(node: ast.expr, names: frozenset[str]) -> set[str]:
    """The names annotation `node` uses, once it is known to be a type this check accepts;
    raises PieceRejected for anything else."""
    used: set[str] = set()
    todo = [node]
    while todo:
        expr = todo.pop()
        if isinstance(expr, ast.Name):
            if expr.id not in TYPE_NAMES and expr.id not in names:
                raise PieceRejected(f"{_where(expr)}: the annotation names {expr.id!r}")
            used.add(expr.id)
        elif isinstance(expr, ast.Constant) and expr.value is None:
            continue
        elif isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):
            todo += [expr.left, expr.right]
        elif isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Name):
            generic, inner = expr.value.id, expr.slice
            used.add(generic)
            if generic == "Literal":
                values = inner.elts if isinstance(inner, ast.Tuple) else [inner]
                if not values or not all(_literal_value(v) for v in values):
                    raise PieceRejected(f"{_where(expr)}: a Literal of something other than constants")
            elif generic == "list":
                todo.append(inner)
            elif generic == "dict" and isinstance(inner, ast.Tuple) and len(inner.elts) == 2:
                todo += inner.elts
            else:
                raise PieceRejected(f"{_where(expr)}: a subscript of {generic!r}")
        else:
            raise PieceRejected(f"{_where(expr)}: an annotation that is a {type(expr).__name__}")
    return used


def _field_default(node: ast.expr | None) -> None:
    """A field's value: nothing, None, or attrs.field(default=None, alias='x', metadata={'json': '...'})."""
    if node is None or (isinstance(node, ast.Constant) and node.value is None):
        return
    ok = (isinstance(node, ast.Call) and not node.args and isinstance(node.func, ast.Attribute)
          and isinstance(node.func.value, ast.Name) and node.func.value.id == "attrs" and node.func.attr == "field")
    if ok:
        assert isinstance(node, ast.Call)
        for kw in node.keywords:
            value = kw.value
            if kw.arg == "default":
                ok = ok and isinstance(value, ast.Constant) and value.value is None
            elif kw.arg == "alias":  # attrs writes it into the source of __init__: an identifier only
                ok = ok and isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value.isidentifier()
            elif kw.arg == "metadata":
                ok = ok and (isinstance(value, ast.Dict) and len(value.keys) == 1
                             and isinstance(value.keys[0], ast.Constant) and value.keys[0].value == "json"
                             and isinstance(value.values[0], ast.Constant) and isinstance(value.values[0].value, str))
            else:
                ok = False
    if not ok:
        raise PieceRejected(f"{_where(node)}: a field's value that is not None or attrs.field(...)")


def _check_class(node: ast.ClassDef, names: frozenset[str]) -> None:
    if (len(node.bases) != 1 or not isinstance(node.bases[0], ast.Name) or node.bases[0].id != "_Record"
            or node.keywords or len(node.decorator_list) != 1 or ast.dump(node.decorator_list[0]) != DECORATOR):
        raise PieceRejected(f"{_where(node)}: class {node.name} is not a generated record class")
    body = node.body[1:] if node.body and _is_docstring(node.body[0]) else node.body
    fields: set[str] = set()
    used: set[str] = set()
    for stmt in body:
        if isinstance(stmt, ast.Pass):
            continue
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.simple):
            raise PieceRejected(f"{_where(stmt)}: class {node.name} holds a {type(stmt).__name__}")
        if stmt.target.id in fields:
            raise PieceRejected(f"{_where(stmt)}: class {node.name} has two fields {stmt.target.id!r}")
        fields.add(stmt.target.id)
        used |= _type_names(stmt.annotation, names)
        _field_default(stmt.value)
    shadowed = fields & (used | TYPE_NAMES | {"Literal", "attrs", "_Record", "_call"})
    if shadowed:
        raise PieceRejected(f"{_where(node)}: a field of class {node.name} is named like a type its "
                            f"annotations use ({', '.join(sorted(shadowed))})")


def _check_function(node: ast.FunctionDef, tool: str, names: frozenset[str]) -> None:
    args = node.args
    shape = (len(args.posonlyargs) == 1 and args.posonlyargs[0].arg == "args" and not args.args
             and len(args.defaults) == 1 and isinstance(args.defaults[0], ast.Constant)
             and args.defaults[0].value is None and args.vararg is None and not args.kwonlyargs
             and args.kwarg is not None and args.kwarg.arg == "kwargs" and not node.decorator_list
             and node.returns is not None)
    if not shape:
        raise PieceRejected(f"{_where(node)}: function {node.name} does not have the generated signature")
    assert args.kwarg is not None and node.returns is not None
    for annotation in (args.posonlyargs[0].annotation, args.kwarg.annotation, node.returns):
        if annotation is None:
            raise PieceRejected(f"{_where(node)}: function {node.name} lacks an annotation")
        _type_names(annotation, names)
    body = node.body[1:] if node.body and _is_docstring(node.body[0]) else node.body
    call = body[0].value if len(body) == 1 and isinstance(body[0], ast.Return) else None
    ok = isinstance(call, ast.Call)
    if isinstance(call, ast.Call):
        parts = call.args
        ok = (isinstance(call.func, ast.Name) and call.func.id == "_call" and not call.keywords and len(parts) == 5
              and isinstance(parts[0], ast.Constant) and parts[0].value == tool
              and (isinstance(parts[1], ast.Name) and parts[1].id in names
                   or isinstance(parts[1], ast.Constant) and parts[1].value is None)
              and isinstance(parts[2], ast.Name) and parts[2].id == "args"
              and isinstance(parts[3], ast.Name) and parts[3].id == "kwargs")
        if ok:
            _type_names(parts[4], names)
    if not ok:
        raise PieceRejected(f"{_where(node)}: function {node.name} does more than call tool {tool!r}")


def check_piece(source: str, tool: str, function: str, classes: Iterable[str],
                aliases: Iterable[str] = ()) -> types.CodeType:
    """The piece's code, compiled, once its source is known to be exactly a generated piece for
    `tool`: the classes (and type aliases) `classes`, the function `function`, then one line
    `alias = function` for each of the tool's `aliases`. Raises PieceRejected."""
    names = frozenset(classes)
    others = tuple(aliases)
    runtime = TYPE_NAMES | {"Literal", "attrs", "_Record", "_call"}
    # the function may be called `list`: it is defined last, and nothing after it reads the name
    # as a type (its aliases' lines only name the function)
    builtin = {"str", "int", "float", "bool", "list", "dict"}
    if (function in names or names & runtime or {function, *others} & (runtime - builtin)
            or len({function, *others}) != 1 + len(others) or names & set(others)):
        raise PieceRejected(f"its names collide with the runtime's or each other "
                            f"({', '.join(sorted(names | {function, *others}))})")
    try:
        tree = ast.parse(source, "tools.py")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise PieceRejected(f"its source does not parse ({type(exc).__name__}: {exc})") from None
    body = list(tree.body)
    if len(body) <= len(others):
        raise PieceRejected(f"it defines {len(body)} names, not a function and {len(others)} aliases")
    tail = body[len(body) - len(others):] if others else []
    for node, alias in zip(tail, others, strict=True):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == alias and isinstance(node.value, ast.Name) and node.value.id == function):
            raise PieceRejected(f"{_where(node)}: not the line `{alias} = {function}` its alias should be")
    defined: list[str] = []
    for node in body[:len(body) - len(others)]:
        if isinstance(node, ast.ClassDef):
            _check_class(node, names)
            defined.append(node.name)
        elif isinstance(node, ast.Assign):
            if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
                raise PieceRejected(f"{_where(node)}: an assignment that is not a type alias")
            _type_names(node.value, names - {node.targets[0].id})
            defined.append(node.targets[0].id)
        elif isinstance(node, ast.FunctionDef):
            _check_function(node, tool, names)
            defined.append(node.name)
        else:
            raise PieceRejected(f"{_where(node)}: a statement that is not a class, an alias or the function "
                                f"({type(node).__name__})")
    if sorted(defined) != sorted(names | {function}) or len(defined) != len(set(defined)) or defined[-1] != function:
        raise PieceRejected(f"it defines {', '.join(defined) or 'nothing'}, not {', '.join(sorted(names))} and then "
                            f"{function}")
    try:
        return compile(tree, "tools.py", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise PieceRejected(f"its source does not compile ({type(exc).__name__}: {exc})") from None


def check_stub(stub: str, names: Iterable[str]) -> None:
    """The stub the model reads is Python made only of the function and the classes `names`,
    their docstrings, annotated fields and `...`: nothing a tool's text could have added (a
    statement that broke out of a comment or a docstring). Raises PieceRejected."""
    allowed = frozenset(names)
    try:
        tree = ast.parse(stub, "stub")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise PieceRejected(f"its stub does not parse ({type(exc).__name__}: {exc})") from None
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
        elif isinstance(node, (ast.ClassDef, ast.FunctionDef)) and not node.decorator_list:
            name = node.name
            body = node.body[1:] if node.body and _is_docstring(node.body[0]) else node.body
            if isinstance(node, ast.FunctionDef):
                fine = (len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                        and body[0].value.value is Ellipsis) or (not body and body is not node.body)
            else:
                fine = all(isinstance(s, ast.Pass) or (isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name))
                           for s in body) and not node.bases and not node.keywords
            if not fine:
                raise PieceRejected(f"{_where(node)}: its stub of {name} holds more than a stub")
        else:
            raise PieceRejected(f"{_where(node)}: its stub holds a {type(node).__name__} statement")
        if name not in allowed:
            raise PieceRejected(f"{_where(node)}: its stub defines {name!r}")
