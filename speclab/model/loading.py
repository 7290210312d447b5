"""Loading user files (TOML, JSON lines) into pydantic models with errors a person can act on.

Every problem becomes one line that names the file, the field path and what was expected, for
example ``scenarios/x.toml: arrival.rate: expected a number greater than 0, got 'fast'``.
Unknown keys are errors, with a did-you-mean when a known key is close. Values are validated
strictly: a boolean or a quoted number where a number belongs is an error, not converted. Model
validators may raise ``ValueError("field.path: message")``; the path is then joined to the error's
location.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import stat
import sys
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar, Union

import annotated_types as at
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from . import limits as L
from .errors import InputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

M = TypeVar("M", bound=BaseModel)

_PATH_PREFIX = re.compile(r"^([A-Za-z_][\w-]*(?:\.[\w-]+|\[\d+\])*): (.+)$", re.S)
_TOML_POS = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")


def display_path(path: str | Path) -> str:
    """The path as a user would write it: relative to the current directory where possible."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)


def read_input(path: str | Path, *, limit: int, what: str) -> str:
    """The text of an input file, read through one bounded reader; every failure is one InputError line.

    Only a regular file is read: a directory, a device (``/dev/zero``) or a FIFO is refused before
    a byte is read (opened non-blocking, so a FIFO with no writer cannot hang us). At most
    ``limit + 1`` bytes are read whatever the file's size claims, so a file that grows or lies
    cannot exceed ``limit``; ``what`` names the file kind in the message. Newlines are translated
    as ``Path.read_text`` does.
    """
    shown = display_path(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise InputError(f"{shown}: no such file") from None
    except OSError as error:
        raise InputError(f"{shown}: cannot read: {error}") from None
    too_big = InputError(f"{shown}: larger than {_size(limit)} (the limit for {what}; docs/limits.md)")
    data = bytearray()
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{shown}: not a regular file")
        if info.st_size > limit:
            raise too_big
        while len(data) <= limit:  # the size may lie (/proc) or grow: read no more than limit + 1
            chunk = os.read(fd, min(limit + 1 - len(data), 1 << 20))
            if not chunk:
                break
            data += chunk
    except OSError as error:
        raise InputError(f"{shown}: cannot read: {error}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise too_big
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(f"{shown}: cannot read: {error}") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _size(limit: int) -> str:
    mib = 1024 * 1024
    return f"{limit // mib} MiB" if limit >= mib and limit % mib == 0 else f"{limit:,} bytes"


def load_toml(path: str | Path) -> dict[str, Any]:
    """Parse a TOML file; a syntax error names the file, line and column."""
    shown = display_path(path)
    text = read_input(path, limit=L.MAX_CONFIG_FILE_BYTES, what="a scenario, lab or gates file")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        message = str(error)
        match = _TOML_POS.search(message)
        if match:
            message = message[: match.start()]
            raise InputError(
                f"{shown}: line {match.group(1)}, column {match.group(2)}: invalid TOML: {message}"
            ) from None
        raise InputError(f"{shown}: invalid TOML: {message}") from None


def load_model(path: str | Path, model: type[M], *, context: dict[str, Any] | None = None) -> M:
    """Read a TOML file and validate it as ``model``; every problem is one line of the InputError."""
    data = load_toml(path)
    return validate(data, model, source=display_path(path), context=context)


def validate(data: Any, model: type[M], *, source: str, context: dict[str, Any] | None = None) -> M:
    """Validate already-parsed data; ``source`` prefixes each error line (a file, or ``file:LINE``).

    Strictly, as JSON: ``true`` is no number and ``"24"`` no integer (pydantic's lax mode would take
    both), while arrays still fill tuples and strings enums, as a file writes them.
    """
    try:
        # default=str: a TOML date or time is a string here, which no field of ours takes for a number
        return model.model_validate_json(json.dumps(data, default=str), strict=True, context=context)
    except ValidationError as error:
        raise InputError("\n".join(describe_errors(error, model, source))) from None


def load_jsonl(path: str | Path, model: type[M], *, context: dict[str, Any] | None = None,
               max_bytes: int = L.MAX_PROMPTS_FILE_BYTES, max_line_chars: int | None = None) -> list[M]:
    """One model per non-blank line; errors name ``file:LINE``. A file over ``max_bytes`` (prompts
    and golden sets alike) or a line over ``max_line_chars`` is refused before it is parsed (a 200
    MB line would stall the run)."""
    shown = display_path(path)
    lines = read_input(path, limit=max_bytes, what="a prompts or golden-set file").splitlines()
    out: list[M] = []
    problems: list[str] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if max_line_chars is not None and len(line) > max_line_chars:
            problems.append(f"{shown}:{number}: {len(line):,} characters; a line may have at most {max_line_chars:,}")
            continue
        try:
            json.loads(line)  # for the decoder's own words on a broken line
        except json.JSONDecodeError as error:
            problems.append(f"{shown}:{number}: invalid JSON: {error.msg} (column {error.colno})")
            continue
        try:
            out.append(model.model_validate_json(line, strict=True, context=context))
        except ValidationError as error:
            problems.extend(describe_errors(error, model, f"{shown}:{number}"))
    if problems:
        raise InputError("\n".join(problems))
    return out


def describe_errors(error: ValidationError, model: type[BaseModel], source: str) -> list[str]:
    """Turn pydantic's errors into ``source: field.path: what was expected`` lines."""
    lines: list[str] = []
    seen_paths: set[tuple[Any, ...]] = set()
    items = error.errors(include_url=False)
    cleaned = [_strip_tags(model, tuple(i.get("loc", ()))) for i in items]
    for item, clean in zip(items, cleaned, strict=True):
        if any(len(other) > len(clean) and other[: len(clean)] == clean for other in cleaned):
            continue  # a union member failed deeper down: that error says more
        loc = tuple(item.get("loc", ()))
        kind = item.get("type", "")
        if kind == "extra_forbidden":
            lines.append(_unknown_key(source, model, loc))
            continue
        if kind in ("value_error", "assertion_error"):
            message = str(item.get("msg", "")).removeprefix("Value error, ").removeprefix("Assertion failed, ")
            match = _PATH_PREFIX.match(message)
            if match:
                path = _join(_format_loc(_strip_tags(model, loc)), match.group(1))
                lines.append(f"{source}: {path}: {match.group(2)}")
            else:
                path = _format_loc(_strip_tags(model, loc))
                lines.append(f"{source}: {path}: {message}" if path else f"{source}: {message}")
            continue
        if clean in seen_paths:
            continue  # one line per field, even when several union members failed
        seen_paths.add(clean)
        field = _field_at(model, clean)
        expected = describe_field(field) if field is not None else _expected_from_ctx(item)
        path = _format_loc(clean) or "(top level)"
        if kind == "missing":
            lines.append(f"{source}: {path}: required" + (f" (expected {expected})" if expected else ""))
            continue
        got = _short_repr(item.get("input"))
        if not expected:
            expected = str(item.get("msg", "a valid value")).lower()
        hint = ""
        if kind == "literal_error" and isinstance(item.get("input"), str):
            choices = _literal_choices(field)
            close = difflib.get_close_matches(str(item.get("input")), choices, n=1)
            if close:
                hint = f"; did you mean {close[0]!r}?"
        lines.append(f"{source}: {path}: expected {expected}, got {got}{hint}")
    return lines


def _unknown_key(source: str, model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    clean = _strip_tags(model, loc)
    key = str(clean[-1]) if clean else "?"
    parent = _type_at(model, clean[:-1])
    known = _field_names(parent)
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{source}: {_format_loc(clean)}: unknown key{hint}"


def _format_loc(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _join(base: str, rest: str) -> str:
    if not base:
        return rest
    return base + rest if rest.startswith("[") else f"{base}.{rest}"


def _short_repr(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _expected_from_ctx(item: Any) -> str:
    ctx = item.get("ctx") or {}
    if "expected" in ctx:
        return f"one of {ctx['expected']}"
    return ""


# ---- walking a model's type tree along an error location -------------------------------------

def _unwrap(annotation: Any) -> list[Any]:
    """The non-None members of a Union / Optional, with Annotated stripped."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        members: list[Any] = []
        for arg in typing.get_args(annotation):
            if arg is not type(None):
                members.extend(_unwrap(arg))
        return members
    return [annotation]


def _model_field(model: type[BaseModel], key: str) -> FieldInfo | None:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return info
    return None


def _step(annotation: Any, part: Any) -> tuple[Any, FieldInfo | None] | None:
    for member in _unwrap(annotation):
        origin = typing.get_origin(member)
        if isinstance(member, type) and issubclass(member, BaseModel) and isinstance(part, str):
            info = _model_field(member, part)
            if info is not None:
                return info.annotation, info
        elif origin in (list, tuple, Sequence) and isinstance(part, int):
            args = typing.get_args(member)
            return (args[0] if args else Any), None
        elif origin is dict and isinstance(part, str):
            args = typing.get_args(member)
            return (args[1] if len(args) == 2 else Any), None
    return None


def _walk(model: type[BaseModel], loc: Sequence[Any]) -> tuple[Any, FieldInfo | None] | None:
    current: Any = model
    info: FieldInfo | None = None
    for part in loc:
        stepped = _step(current, part)
        if stepped is None:
            return None
        current, info = stepped
    return current, info


def _strip_tags(model: type[BaseModel], loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """Drop pydantic's union-member tags (``'str'``, ``'list[Message]'``) from a location."""
    out: list[Any] = []
    current: Any = model
    for part in loc:
        stepped = _step(current, part) if current is not None else None
        if stepped is None and current is not None and isinstance(part, str) and len(_unwrap(current)) > 1:
            continue
        out.append(part)
        current = stepped[0] if stepped else None
    return tuple(out)


def _field_at(model: type[BaseModel], loc: Sequence[Any]) -> FieldInfo | None:
    walked = _walk(model, loc)
    if walked is None:
        return None
    annotation, info = walked
    if info is not None:
        return info
    return FieldInfo.from_annotation(annotation)


def _type_at(model: type[BaseModel], loc: Sequence[Any]) -> Any:
    walked = _walk(model, loc)
    return walked[0] if walked else None


def _field_names(annotation: Any) -> list[str]:
    names: list[str] = []
    for member in _unwrap(annotation) if annotation is not None else []:
        if isinstance(member, type) and issubclass(member, BaseModel):
            for name, info in member.model_fields.items():
                names.append(info.alias or name)
    return names


def _literal_choices(field: FieldInfo | None) -> list[str]:
    if field is None:
        return []
    choices: list[str] = []
    for member in _unwrap(field.annotation):
        if typing.get_origin(member) is typing.Literal:
            choices.extend(str(a) for a in typing.get_args(member))
    return choices


def describe_field(field: FieldInfo) -> str:
    """'a number greater than 0', "one of 'chat', 'completions'", 'a list of strings' ..."""
    base = _describe_type(field.annotation)
    bounds = []
    for meta in field.metadata:
        if isinstance(meta, at.Gt):
            bounds.append(f"greater than {_num(meta.gt)}")
        elif isinstance(meta, at.Ge):
            bounds.append(f"at least {_num(meta.ge)}")
        elif isinstance(meta, at.Lt):
            bounds.append(f"less than {_num(meta.lt)}")
        elif isinstance(meta, at.Le):
            bounds.append(f"at most {_num(meta.le)}")
        elif isinstance(meta, at.MinLen) and meta.min_length:
            bounds.append(f"with at least {meta.min_length} item{'s' if meta.min_length > 1 else ''}")
    return " ".join([base, " and ".join(bounds)]).strip()


def _num(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _describe_type(annotation: Any) -> str:
    members = _unwrap(annotation)
    parts = [_describe_one(m) for m in members]
    unique = list(dict.fromkeys(p for p in parts if p))
    return " or ".join(unique) if unique else "a valid value"


def _describe_one(member: Any) -> str:
    origin = typing.get_origin(member)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(member))
    if origin in (list, tuple, Sequence):
        args = typing.get_args(member)
        inner = _describe_type(args[0]) if args else ""
        return "a list" + (f" of {_plural(inner)}" if inner and inner != "a valid value" else "")
    if origin is dict or member is dict:
        return "a table"
    if member is bool:
        return "true or false"
    if member is int:
        return "an integer"
    if member is float:
        return "a number"
    if member is str:
        return "a string"
    if isinstance(member, type) and issubclass(member, BaseModel):
        return "a table"
    if isinstance(member, type) and issubclass(member, Path):
        return "a path"
    return ""


def _plural(phrase: str) -> str:
    for article in ("a ", "an "):
        if phrase.startswith(article):
            phrase = phrase[len(article):]
    words = phrase.split(" ")
    if words and words[0] in ("string", "number", "integer", "table", "list", "path"):
        words[0] += "s"
    return " ".join(words)
