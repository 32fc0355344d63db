#!/usr/bin/env python3
"""Makes the C++ of tensord's op table from proto/tensord/v1/ops.json.

    gen_op_table.py OPS_JSON OUT_DIR

writes, under OUT_DIR (CMake runs it at configure time, into
build/generated; nothing generated is committed):

  core/op_enums.h      the op enums (OpSpecKind; BinaryOp, UnaryOp,
                       ReduceOp, InPlaceOp, LossKind, OptimizerKind), one
                       enumerator per row in the table's order. Plain C++17:
                       nvcc includes it through core/op_kinds.h.
  core/op_rows.inc     the rows as OpRow initializers (core/base/op_table.h),
                       and each kind's first row, for core/op_table.cc.
  core/op_backward.inc the backward of each row, as GradMath member
                       pointers, for core/backward_ops.cc.
  core/op_emit.inc     what runs each row, as Executor member pointers,
                       for core/executor.cc.
  core/op_visit.inc    VisitUnaryOp over the unary rows' functors, for
                       core/base/scalar_ops.h (CPU loops and CUDA kernels).
  tensord/op_methods.inc  the C++ client's UnaryOp, the Tensor and Batch
                       methods of the rows marked `method`, and the
                       functions (with Batch methods) of the rows with a
                       `func`, for client/tensord/types.h, tensor.h,
                       batch.h, client.h and client/ops.cc.
  proto/op_wire.inc    each wire enum's values with their rows, for
                       proto/wire/op_convert.cc (a value the proto lacks
                       fails the build there).
  tests/op_spellings.inc  each row's C++ client spelling as a function over
                       its example inputs, for tests/client/op_spellings_test.cc
                       (a spelling the client lacks fails the build there).

It checks the table as it reads it (unique ids, known kinds, every field
a known value) and exits 1 naming the row and field of the first problem.
Standard library only, Python 3.9+ (the Python client's build reads the same
file: client/python/build_stubs.py).
"""
import json
import os
import re
import sys
import textwrap

GRAD_INPUTS = {"all": "kAll", "none": "kNone", "first": "kFirst",
               "all_but_first": "kAllButFirst"}
SAVES_INPUTS = {"all": "kAll", "none": "kNone", "first": "kFirst"}
GRAD_FN_KEYS = ("default", "scalar_first", "tensor_tensor", "all_dims", "bias")
ROW_KEYS = {"id", "name", "kind", "variant", "wire", "arity", "grad_inputs",
            "saves_inputs", "saves_output", "saves_plan", "grad_fn", "backward", "emit", "plan",
            "python", "cpp", "example", "doc", "functor", "params", "integers",
            "kernel_name", "bool_error", "method", "func"}
KIND_KEYS = {"kind", "selector", "enum", "doc", "returns_input", "autograd_state"}
INTEGERS = {"promote": "kPromote", "keep": "kKeep", "refuse": "kRefuse"}
MAX_PARAMS = 2


class TableError(Exception):
    pass


def load(path):
    with open(path, encoding="utf-8") as f:
        table = json.load(f)
    kinds = table["kinds"]
    kind_names = [k["kind"] for k in kinds]
    if len(set(kind_names)) != len(kind_names):
        raise TableError("a kind is listed twice")
    seen = set()
    for row in table["ops"]:
        where = f"op {row.get('id')!r}"
        unknown = set(row) - ROW_KEYS
        if unknown:
            raise TableError(f"{where}: unknown field(s) {sorted(unknown)}")
        if row["id"] in seen:
            raise TableError(f"{where}: the id repeats")
        seen.add(row["id"])
        if row["kind"] not in kind_names:
            raise TableError(f"{where}: unknown kind {row['kind']!r}")
        if row["grad_inputs"] not in GRAD_INPUTS:
            raise TableError(f"{where}: grad_inputs is one of {sorted(GRAD_INPUTS)}")
        if row["saves_inputs"] not in SAVES_INPUTS:
            raise TableError(f"{where}: saves_inputs is one of {sorted(SAVES_INPUTS)}")
        lo, hi = row["arity"]
        if lo < 1 or (hi != -1 and hi < lo):
            raise TableError(f"{where}: arity is [min >= 1, max >= min or -1]")
        grad_fn = row["grad_fn"]
        if isinstance(grad_fn, dict) and (set(grad_fn) - set(GRAD_FN_KEYS)
                                          or "default" not in grad_fn):
            raise TableError(f"{where}: grad_fn's keys are {GRAD_FN_KEYS}, with default")
        if row["kind"] == "Unary":
            if "functor" not in row or row.get("integers") not in INTEGERS:
                raise TableError(f"{where}: a unary row has a functor and "
                                 f"integers (one of {sorted(INTEGERS)})")
            if row["integers"] == "refuse" and "kernel_name" not in row:
                raise TableError(f"{where}: refusing integers names torch's kernel")
        if "func" in row:
            parse_func(row)  # raises TableError naming the problem
            if " " not in (row["wire"] or "") or "doc" not in row:
                raise TableError(f"{where}: a func row has a wire enum value and a doc")
        if len(row.get("params", [])) > MAX_PARAMS:
            raise TableError(f"{where}: at most {MAX_PARAMS} params")
        if (row["emit"] is None) != (row["plan"] is None):
            raise TableError(f"{where}: a client op (with a plan) has an emit")
        if (row["backward"] is None) != (row["grad_inputs"] == "none"):
            raise TableError(f"{where}: a row has a backward exactly when it has "
                             "differentiable inputs")
    # Rows of one kind are together, in the kinds' order, so that a kind's
    # rows are kFirstRowOfKind[kind] + variant.
    order = [kind_names.index(row["kind"]) for row in table["ops"]]
    if order != sorted(order):
        raise TableError("rows are grouped by kind, in the order of `kinds`")
    for kind in kinds:
        unknown = set(kind) - KIND_KEYS
        if unknown:
            raise TableError(f"kind {kind['kind']}: unknown field(s) {sorted(unknown)}")
        rows = [r for r in table["ops"] if r["kind"] == kind["kind"]]
        if not rows:
            raise TableError(f"kind {kind['kind']}: no row")
        if "selector" not in kind:
            if len(rows) != 1:
                raise TableError(f"kind {kind['kind']}: one row without a selector")
        elif kind["selector"] == "log":
            if [r["variant"] for r in rows] != list(range(len(rows))):
                raise TableError(f"kind {kind['kind']}: variants are 0, 1, ...")
    return table


def cxx_string(s):
    return json.dumps(s) if s is not None else '""'


def enums(table):
    out = ["// Generated by core/base/gen_op_table.py from proto/tensord/v1/ops.json:",
           "// do not edit. The op enums, one enumerator per row of the table.",
           "#ifndef TENSORD_GENERATED_CORE_OP_ENUMS_H_",
           "#define TENSORD_GENERATED_CORE_OP_ENUMS_H_",
           "", "namespace tensord::core {", "",
           "// What an OpSpec is: the kinds of the table, in its order.",
           "enum class OpSpecKind : int {"]
    for kind in table["kinds"]:
        out.append(f"  k{kind['kind']},  // {kind['doc']}")
    out += ["};", f"inline constexpr int kOpSpecKindCount = {len(table['kinds'])};",
            f"inline constexpr int kOpRowCount = {len(table['ops'])};", ""]
    for kind in table["kinds"]:
        if "enum" not in kind:
            continue
        rows = [r for r in table["ops"] if r["kind"] == kind["kind"]]
        out.append(f"// The {kind['kind']} ops: {', '.join(r['id'] for r in rows)}.")
        out.append(f"enum class {kind['enum']} : int {{")
        for r in rows:
            out.append(f"  {r['variant']},")
        out += ["};", ""]
    out += ["}  // namespace tensord::core", "",
            "#endif  // TENSORD_GENERATED_CORE_OP_ENUMS_H_", ""]
    return "\n".join(out)


def rows_inc(table):
    kind_names = [k["kind"] for k in table["kinds"]]
    out = ["// Generated by core/base/gen_op_table.py from proto/tensord/v1/ops.json:",
           "// do not edit. Included by core/op_table.cc.",
           "inline constexpr OpRow kOpRows[] = {"]
    for row in table["ops"]:
        grad_fn = row["grad_fn"]
        if not isinstance(grad_fn, dict):
            grad_fn = {"default": grad_fn}
        variant = row.get("variant", 0)
        variant = f"static_cast<int>({next(k['enum'] for k in table['kinds'] if k['kind'] == row['kind'])}::{variant})" \
            if isinstance(variant, str) else str(variant)
        fields = [
            cxx_string(row["id"]), cxx_string(row.get("name", row["id"])),
            f"OpSpecKind::k{row['kind']}", variant,
            str(row["arity"][0]), str(row["arity"][1]),
            f"GradInputs::{GRAD_INPUTS[row['grad_inputs']]}",
            f"SavedInputs::{SAVES_INPUTS[row['saves_inputs']]}",
            "true" if row.get("saves_output", False) else "false",
        ] + [cxx_string(grad_fn.get(k)) for k in GRAD_FN_KEYS] + [
            cxx_string(row["backward"]), cxx_string(row["emit"]),
            cxx_string(row["plan"]),
            cxx_string(row["cpp"]), cxx_string(row["python"]),
            f"UnaryIntegers::{INTEGERS.get(row.get('integers'), 'kKeep')}",
            cxx_string(row.get("kernel_name")), cxx_string(row.get("bool_error")),
            str(len(row.get("params", []))),
            "{" + ", ".join(repr(float(v)) for _, v in row.get("params", [])) + "}"]
        kind = next(k for k in table["kinds"] if k["kind"] == row["kind"])
        fields += ["true" if kind.get(k, False) else "false"
                   for k in ("returns_input", "autograd_state")]
        fields.append("true" if row.get("saves_plan", False) else "false")
        out.append("    {" + ", ".join(fields) + "},")
    out.append("};")
    first = []
    for name in kind_names:
        first.append(str(next(i for i, r in enumerate(table["ops"]) if r["kind"] == name)))
    out.append("inline constexpr int kFirstRowOfKind[] = {" + ", ".join(first) + "};")
    out.append("// Which of its kind's rows an op is, per kind.")
    out.append("inline constexpr int (*kVariantOf[])(const OpSpec&) = {")
    for kind in table["kinds"]:
        selector = kind.get("selector")
        if selector is None:
            body = "return 0;"
        else:
            body = f"return static_cast<int>(op.{selector});"
        out.append(f"    [](const OpSpec&{' op' if selector else ''}) {{ {body} }},  // {kind['kind']}")
    out.append("};")
    out.append("")
    return "\n".join(out)


def member_table(table, field, array, member_type, owner, included_by):
    """A static array of each row's `field` as `owner` member pointers."""
    out = ["// Generated by core/base/gen_op_table.py from proto/tensord/v1/ops.json:",
           f"// do not edit. Included by {included_by}:",
           f"// each row's {field} (nullptr: none).",
           f"static constexpr {member_type} {array}[] = {{"]
    for row in table["ops"]:
        fn = row[field]
        out.append(f"    &{owner}::{fn},  // {row['id']}" if fn
                   else f"    nullptr,  // {row['id']}")
    out += ["};", ""]
    return "\n".join(out)


def backward_inc(table):
    return member_table(table, "backward", "kBackwardOf", "Formula", "GradMath",
                        "GradMath::FormulaOf (core/autograd/backward_ops.cc)")


def visit_inc(table):
    """VisitUnaryOp over the unary rows' functors (core/base/scalar_ops.h)."""
    out = ["// Generated by core/base/gen_op_table.py from proto/tensord/v1/ops.json:",
           "// do not edit. Included by core/base/scalar_ops.h after the functors.",
           "",
           "// Calls f(functor) with the functor of `op` (its numeric arguments",
           "// `a`, `b` in the op table's `params` order); false for an unknown op.",
           "template <typename F>",
           "inline bool VisitUnaryOp(UnaryOp op, [[maybe_unused]] double a,",
           "                         [[maybe_unused]] double b, F&& f) {",
           "  switch (op) {"]
    for row in table["ops"]:
        if row["kind"] != "Unary":
            continue
        args = ", ".join("ab"[i] for i in range(len(row.get("params", []))))
        out.append(f"    case UnaryOp::{row['variant']}:")
        out.append(f"      f({row['functor']}{{{args}}});")
        out.append("      return true;")
    out += ["  }", "  return false;", "}", ""]
    return "\n".join(out)


FUNC_TYPES = {"Tensor", "Tensor?", "bool", "int", "float", "int[]"}


def parse_func(row):
    """The row's `func` (native_functions.yaml's form, every argument after
    the first named as the wire message's field) as (name, [(type, arg,
    default or None)])."""
    m = re.fullmatch(r"(\w+)\((.*)\)", row["func"])
    if m is None or m.group(1) != row["id"]:
        raise TableError(f"op {row['id']!r}: func is {row['id']}(Type name[=default], ...)")
    args = []
    for part in m.group(2).split(", "):
        decl, _, default = part.partition("=")
        type_, _, name = decl.partition(" ")
        if type_ not in FUNC_TYPES or not name.isidentifier():
            raise TableError(f"op {row['id']!r}: func argument {part!r}: a type of "
                             f"{sorted(FUNC_TYPES)} and a name")
        args.append((type_, name, default or None))
    if args[0][0] != "Tensor":
        raise TableError(f"op {row['id']!r}: func's first argument is a Tensor")
    return m.group(1), args


def camel(name):
    return "".join(w.capitalize() for w in name.split("_"))


def func_options(args):
    """The trailing defaulted non-tensor arguments, gathered into one
    options struct when there are two or more (C++ has no keywords)."""
    tail = []
    for arg in reversed(args):
        if arg[0].startswith("Tensor") or arg[2] is None:
            break
        tail.insert(0, arg)
    return tail if len(tail) >= 2 else []


CXX_TYPES = {"bool": "bool", "int": "int64_t", "float": "double",
             "int[]": "const std::vector<int64_t>&"}
CXX_DEFAULTS = {"None": "std::nullopt", "False": "false", "True": "true"}


def cxx_func(row, batch):
    """The C++ declaration of a func row (its Tensor function, or its Batch
    method when `batch`) and its options struct's name ("" when none)."""
    name, args = parse_func(row)
    options = func_options(args)
    struct = camel(name) + "Options" if options else ""
    params = []
    for type_, arg, default in args[:len(args) - len(options)]:
        if type_ == "Tensor":
            decl = "Input" if batch else "const Tensor&"
        elif type_ == "Tensor?":
            decl = "std::optional<Input>" if batch else "const std::optional<Tensor>&"
        else:
            decl = CXX_TYPES[type_]
        value = f" = {CXX_DEFAULTS.get(default, default)}" if default else ""
        params.append((f"{decl} {arg}", value))
    if struct:
        params.append((f"const {struct}& options", " = {}"))
    return name, params, options, struct


def cxx_func_body(row, options, operand):
    """The statements that fill the row's wire message from the arguments."""
    _, args = parse_func(row)
    field, value = row["wire"].split(" ")
    lines = ["  v1::Op m;", f"  auto* args = m.mutable_{field}();",
             f"  args->set_op(v1::{value});"]
    for type_, arg, _ in args:
        source = f"options.{arg}" if (type_, arg, _) in options else arg
        if type_ == "Tensor":
            lines.append(f"  *args->mutable_{arg}() = {operand(arg)};")
        elif type_ == "Tensor?":
            lines.append(f"  if ({arg}.has_value()) *args->mutable_{arg}() = "
                         f"{operand(f'(*{arg})')};")
        elif type_ == "int[]":
            lines.append(f"  args->mutable_{arg}()->Add({source}.begin(), {source}.end());")
        else:
            lines.append(f"  args->set_{arg}({source});")
    return lines


def signature(head, params, with_defaults=True):
    """`head(params...)`, one parameter per line when it is long."""
    parts = [p + v if with_defaults else p for p, v in params]
    line = f"{head}(" + ", ".join(parts) + ")"
    if len(line) <= 78:
        return line
    return f"{head}(\n    " + ",\n    ".join(parts) + ")"


def func_inc(table):
    """The C++ client's functions of the `func` rows: declarations (with
    their options structs) for tensor.h, Batch methods for batch.h,
    definitions for client/ops.cc, using-declarations for client.h."""
    decls, batch, defs, using = [], [], [], []
    for r in table["ops"]:
        if "func" not in r:
            continue
        doc = ["// " + line for line in textwrap.wrap(r["doc"], 74)]
        name, params, options, struct = cxx_func(r, batch=False)
        if struct:
            decls += [f"// {name}'s trailing arguments.", f"struct {struct} {{"]
            for type_, arg, default in options:
                decls.append(f"  {CXX_TYPES[type_]} {arg} = {CXX_DEFAULTS.get(default, default)};")
            decls.append("};")
            using.append(f"using client::{struct};")
        using.append(f"using client::{name};")
        decls += doc + [signature(f"Tensor {name}", params) + ";"]
        defs += [signature(f"Tensor {name}", params, with_defaults=False) + " {"]
        defs += cxx_func_body(r, options, lambda a: f"HandleOperand({a})")
        defs += [f"  return RunOp({params[0][0].split()[-1]}, std::move(m));", "}"]
        name, params, options, struct = cxx_func(r, batch=True)
        batch += [f"  // {name}: as the function tensord::{name}.",
                  "  " + signature(f"Value {name}", params).replace("\n", "\n  ") + ";"]
        defs += [signature(f"Batch::Value Batch::{name}", params, with_defaults=False) + " {"]
        defs += cxx_func_body(r, options, lambda a: f"TENSORD_OPERAND({a})")
        defs += ["  return Record(&m);", "}"]
    return decls, batch, defs, using


def client_inc(table):
    """The C++ client's UnaryOp (wire numbers) and each `method` row's method."""
    unary = [r for r in table["ops"] if r["kind"] == "Unary"]
    out = ["// Generated by core/base/gen_op_table.py from proto/tensord/v1/ops.json:",
           "// do not edit. Included by client/tensord/types.h (TENSORD_OP_ENUMS),",
           "// tensor.h (TENSORD_TENSOR_METHODS, TENSORD_FUNCTIONS), batch.h",
           "// (TENSORD_BATCH_METHODS), client.h (TENSORD_USING), client/ops.cc",
           "// (TENSORD_FUNCTION_DEFS) and client/grpc_enums.h (TENSORD_WIRE_ASSERTS).",
           "#if defined(TENSORD_OP_ENUMS) && !defined(TENSORD_OP_ENUMS_DONE)",
           "#define TENSORD_OP_ENUMS_DONE",
           "// The unary ops, numbered as tensord.v1.UnaryOp (client/grpc_enums.h",
           "// proves it).",
           "enum class UnaryOp : int {"]
    for i, r in enumerate(unary):
        out.append(f"  {r['variant']} = {i + 1},")
    out += ["};", "#endif", ""]
    methods, batch = [], []
    for r in unary:
        if not r.get("method"):
            continue
        params = r.get("params", [])
        decl = ", ".join(f"double {n} = {float(v)!r}" for n, v in params)
        args = ", ".join(n for n, _ in params)
        doc = f"  // F.{r['id']}({', '.join(['x'] + [n for n, _ in params])})"
        methods += [doc, f"  Tensor {r['id']}({decl}) const {{",
                    f"    return unary(UnaryOp::{r['variant']}, {{{args}}});", "  }"]
        batch += [doc, f"  Value {r['id']}(Input x{', ' if decl else ''}{decl}) {{",
                  f"    return unary(UnaryOp::{r['variant']}, x, {{{args}}});", "  }"]
    decls, func_batch, defs, using = func_inc(table)
    out += ["#ifdef TENSORD_TENSOR_METHODS", "#undef TENSORD_TENSOR_METHODS"] + methods
    out += ["#endif", "#ifdef TENSORD_FUNCTIONS", "#undef TENSORD_FUNCTIONS"] + decls
    out += ["#endif", "#ifdef TENSORD_BATCH_METHODS", "#undef TENSORD_BATCH_METHODS"]
    out += batch + func_batch
    out += ["#endif", "#ifdef TENSORD_FUNCTION_DEFS", "#undef TENSORD_FUNCTION_DEFS"] + defs
    out += ["#endif", "#ifdef TENSORD_USING", "#undef TENSORD_USING"] + using
    out += ["#endif", "#ifdef TENSORD_WIRE_ASSERTS", "#undef TENSORD_WIRE_ASSERTS"]
    for r in unary:
        value = r["wire"].split(" ")[1]
        out.append(f"static_assert(Same(UnaryOp::{r['variant']}, v1::{value}));")
    out.append(f"static_assert(Same(UnaryOp::{unary[-1]['variant']}, v1::UnaryOp_MAX));")
    out += ["#endif", ""]
    return "\n".join(out)


def emit_inc(table):
    return member_table(table, "emit", "kEmitOf", "Emit", "Executor",
                        "Executor::EmitOf (core/executor/executor.cc)")


def wire_inc(table):
    """Per wire enum: (proto value, row) pairs and the names for messages."""
    groups = {}
    for i, row in enumerate(table["ops"]):
        if not row["wire"] or " " not in row["wire"]:
            continue
        field, value = row["wire"].split(" ")
        groups.setdefault(field, []).append((value, i, row["id"]))
    out = ["// Generated by core/base/gen_op_table.py from proto/tensord/v1/ops.json:",
           "// do not edit. Included by proto/wire/op_convert.cc: each wire enum's",
           "// values and the op table's row each names.",
           "struct WireValue { int value; int row; };"]
    for field, values in groups.items():
        out.append(f"// Op.{field}")
        out.append(f"constexpr WireValue kWire_{field}[] = {{")
        for value, i, op_id in values:
            out.append(f"    {{v1::{value}, {i}}},  // {op_id}")
        out.append("};")
        names = [v for v, _, _ in values]
        listed = ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]
        out.append(f"constexpr const char kWireNames_{field}[] = {json.dumps(listed)};")
    out.append("")
    return "\n".join(out)


def spellings_inc(table):
    """Each client row's C++ spelling as a function over its example inputs."""
    out = ["// Generated by core/base/gen_op_table.py from proto/tensord/v1/ops.json:",
           "// do not edit. Included by tests/client/op_spellings_test.cc, which",
           "// defines Input(), Float(), Ints(), Bools() and Consume().",
           ""]
    entries = []
    for row in table["ops"]:
        if not row["cpp"]:
            continue
        name = "Spell_" + row["id"]
        differentiable = row["grad_inputs"] != "none"
        out.append(f"// {row['id']}: {row['cpp']}")
        out.append(f"void {name}(const Client& tensord_client) {{")
        for var, spec in row["example"].items():
            if isinstance(spec, list):
                spec = {"shape": spec}
            dims = "{" + ", ".join(str(d) for d in spec["shape"]) + "}"
            if "ints" in spec:
                make = f"Ints(tensord_client, {dims}, {spec['ints']})"
            elif spec.get("bool"):
                make = f"Bools(tensord_client, {dims})"
            else:
                grad = "true" if spec.get("grad", differentiable) else "false"
                make = (f"Float(tensord_client, {dims}, {spec.get('low', -2.0)}, "
                        f"{spec.get('high', 2.0)}, {grad})")
            out.append(f"  [[maybe_unused]] Tensor {var} = {make};")
        out.append(f"  Consume([&] {{ return {row['cpp']}; }});")
        out.append("}")
        entries.append(f'    {{"{row["id"]}", &{name}}},')
    out.append("const Spelling kSpellings[] = {")
    out += entries
    out += ["};", ""]
    return "\n".join(out)


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return  # unchanged: no rebuild
    except FileNotFoundError:
        pass
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main(argv):
    if len(argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        table = load(argv[1])
    except (TableError, KeyError, ValueError) as e:
        print(f"{argv[1]}: {e}", file=sys.stderr)
        return 1
    out = argv[2]
    write(os.path.join(out, "core", "op_enums.h"), enums(table))
    write(os.path.join(out, "core", "op_rows.inc"), rows_inc(table))
    write(os.path.join(out, "core", "op_backward.inc"), backward_inc(table))
    write(os.path.join(out, "core", "op_emit.inc"), emit_inc(table))
    write(os.path.join(out, "core", "op_visit.inc"), visit_inc(table))
    write(os.path.join(out, "tensord", "op_methods.inc"), client_inc(table))
    write(os.path.join(out, "proto", "op_wire.inc"), wire_inc(table))
    write(os.path.join(out, "tests", "op_spellings.inc"), spellings_inc(table))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
