"""SQL is built with bound parameters only: no string formatting reaches ``text()``,
``literal_column()``, ``exec_driver_sql()`` or ``execute()``.

The source is scanned (``ast``): the SQL argument of those calls may be a string literal (or an
f-string without placeholders), a name bound only to such literals, or an SQLAlchemy construct;
an f-string with placeholders, ``%`` formatting, ``.format()`` or ``+`` with anything but
literals fails the test naming the file and line. DDL cannot take bound parameters; the few
statements that format identifiers from constants are listed in :data:`ALLOWED`, with a reason.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("app", "workers", "migrations", "frontend", "scripts")
SQL_FUNCTIONS = {"text", "literal_column"}  # when imported from sqlalchemy
SQL_METHODS = {"execute", "exec_driver_sql"}

# (path, the statement's first line, stripped) -> why it is safe
ALLOWED: dict[tuple[str, str], str] = {
    (
        "migrations/versions/0009_lz4_for_chunk_blobs.py",
        """op.execute(f'ALTER TABLE {table} ALTER COLUMN "{column}" SET COMPRESSION {method}')""",
    ): "DDL takes no parameters; table, column and method come from the migration's constants",
}


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    code: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.why}: {self.code}"


def _sqlalchemy_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """Local names of ``sqlalchemy.text``-like functions, and aliases of the sqlalchemy module."""
    functions: set[str] = set()
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy"):
            functions |= {a.asname or a.name for a in node.names if a.name in SQL_FUNCTIONS}
        elif isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "sqlalchemy"}
    return functions, modules


def _assignments(tree: ast.Module) -> dict[str, list[ast.expr]]:
    found: dict[str, list[ast.expr]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found.setdefault(target.id, []).append(node.value)
        elif (
            isinstance(node, ast.AnnAssign | ast.AugAssign)
            and isinstance(node.target, ast.Name)
            and node.value is not None
        ):
            found.setdefault(node.target.id, []).append(node.value)
    return found


def _formatted(expr: ast.expr, assigned: dict[str, list[ast.expr]], depth: int = 0) -> str | None:
    """Why ``expr`` builds SQL text from values, or None when it does not."""
    if isinstance(expr, ast.JoinedStr):
        if any(isinstance(v, ast.FormattedValue) for v in expr.values):
            return "an f-string with placeholders"
        return None
    if isinstance(expr, ast.BinOp):
        if isinstance(expr.op, ast.Mod) and _stringish(expr.left):
            return "% formatting"
        if isinstance(expr.op, ast.Add):
            parts = [expr.left, expr.right]
            if not all(isinstance(p, ast.Constant) for p in parts):
                inner = [_formatted(p, assigned, depth) for p in parts]
                if any(inner) or not all(_stringish(p) for p in parts):
                    return "concatenation with a value"
        return None
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        if expr.func.attr == "format" and _stringish(expr.func.value):
            return ".format()"
        if expr.func.attr == "join" and _stringish(expr.func.value):
            return "str.join() of values"
        return None
    if isinstance(expr, ast.Name) and depth < 3:
        for value in assigned.get(expr.id, []):
            why = _formatted(value, assigned, depth + 1)
            if why:
                return f"{why} (through '{expr.id}')"
    return None


def _stringish(expr: ast.expr) -> bool:
    return (isinstance(expr, ast.Constant) and isinstance(expr.value, str)) or isinstance(
        expr, ast.JoinedStr
    )


def _sql_argument(call: ast.Call, functions: set[str], modules: set[str]) -> ast.expr | None:
    func = call.func
    is_sql = (isinstance(func, ast.Name) and func.id in functions) or (
        isinstance(func, ast.Attribute)
        and (
            func.attr in SQL_METHODS
            or (
                func.attr in SQL_FUNCTIONS
                and isinstance(func.value, ast.Name)
                and func.value.id in modules | {"sa"}
            )
        )
    )
    return call.args[0] if is_sql and call.args else None


def scan(path: Path, root: Path = ROOT) -> list[Finding]:
    source = path.read_text()
    tree = ast.parse(source, filename=str(path))
    functions, modules = _sqlalchemy_names(tree)
    assigned = _assignments(tree)
    lines = source.splitlines()
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        argument = _sql_argument(node, functions, modules)
        why = None if argument is None else _formatted(argument, assigned)
        if why:
            rel = path.relative_to(root).as_posix()
            found.append(Finding(rel, node.lineno, lines[node.lineno - 1].strip(), why))
    return found


def test_sql_is_built_with_bound_parameters_only() -> None:
    found = [f for d in SCANNED for p in sorted((ROOT / d).rglob("*.py")) for f in scan(p)]
    unexplained = [f for f in found if (f.path, f.code) not in ALLOWED]
    assert not unexplained, "SQL built from values:\n" + "\n".join(map(str, unexplained))
    stale = set(ALLOWED) - {(f.path, f.code) for f in found}
    assert not stale, f"allowed statements no longer in the code: {sorted(stale)}"


def test_the_scan_finds_formatted_sql(tmp_path: Path) -> None:
    bad = tmp_path / "example.py"
    code = """
from sqlalchemy import text
name = "run"
query = "SELECT * FROM " + name
def f(session, table, run_id):
    session.execute(text(f"SELECT * FROM {table}"))
    session.execute(text("SELECT * FROM run WHERE id = %s" % run_id))
    session.execute(text("SELECT * FROM {}".format(table)))
    session.execute(text(query))
    session.exec_driver_sql("DELETE FROM " + table)
    session.execute(text("SELECT * FROM run WHERE id = :id"), {"id": run_id})
    session.execute(text(f"SELECT 1"))
"""
    bad.write_text(code)
    found = scan(bad, tmp_path)
    assert sorted(f.line for f in found) == [6, 7, 8, 9, 10], [str(f) for f in found]
