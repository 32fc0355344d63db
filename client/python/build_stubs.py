"""Build-time only: generates tensord's gRPC stubs and says which runtime they need.

Contract:
  * find_proto_root() -> the directory holding tensord/v1/tensord.proto:
    $TENSORD_PROTO_ROOT, else ./proto beside this file (an sdist carries it
    there), else ../../proto (the repository's tree, where client/python
    lives). Raises FileNotFoundError naming the places it looked.
  * find_generator() -> a Generator that can compile the proto: grpcio-tools
    (`python -m grpc_tools.protoc`) when importable and able to compile it
    (proto3 `optional` rules out old bundled protocs, e.g. Debian 12's
    python3-grpc-tools), else the system `protoc` with `grpc_python_plugin`
    (Debian: protobuf-compiler + protobuf-compiler-grpc). Raises RuntimeError
    saying what to install when neither works.
  * Generator.generate(proto_root, out_dir) writes tensord/v1/tensord_pb2.py,
    tensord_pb2_grpc.py and an empty __init__.py under out_dir (so the stubs
    become the subpackage `tensord.v1` of the client package).
  * Generator.requirements() -> the runtime pins for the generated code:
      protobuf  >= the Python protobuf release that matches the generator's
                protoc, < the next major (protobuf's generated code is only
                promised to work on a runtime at least as new as its
                generator, within that major);
      grpcio    >= grpcio-tools' own version (newer *_pb2_grpc.py check it at
                import) or, for the system plugin, >= 1.51 (Debian 12's, the
                oldest we test);
      numpy     >= 1.21.
    With grpcio-tools the protobuf pin is the one grpcio-tools itself declares
    for its bundled protoc, verbatim.

Used by setup.py only; nothing here is imported at run time.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata

PROTO_FILE = os.path.join("tensord", "v1", "tensord.proto")
# The op table, beside the proto (an sdist carries both).
OP_TABLE_FILE = os.path.join("tensord", "v1", "ops.json")
# What the client's op facts (tensord/_op_table.py) keep of each row.
OP_FACTS = ("id", "name", "kind", "wire", "arity", "grad_inputs", "grad_fn",
            "params", "method", "func", "doc", "python", "example",
            # a unary op's dtype rule, as the planner's (tensord/_planner.py)
            "integers", "kernel_name", "bool_error")
HERE = os.path.dirname(os.path.abspath(__file__))
NUMPY_REQUIREMENT = "numpy>=1.21"
# grpc_python_plugin has no --version: Debian 12's grpcio, the oldest tested.
SYSTEM_PLUGIN_GRPCIO_REQUIREMENT = "grpcio>=1.51"


def find_proto_root():
    candidates = [os.environ.get("TENSORD_PROTO_ROOT", ""),
                  os.path.join(HERE, "proto"),
                  os.path.join(HERE, "..", "..", "proto")]
    for root in candidates:
        if root and os.path.isfile(os.path.join(root, PROTO_FILE)):
            return os.path.abspath(root)
    raise FileNotFoundError(
        f"cannot find {PROTO_FILE}: looked in $TENSORD_PROTO_ROOT, "
        f"{candidates[1]} and {candidates[2]}; build from the tensord "
        "repository (client/python) or set TENSORD_PROTO_ROOT")


def protobuf_requirement_for_protoc(version):
    """`protobuf>=X,<Y` for code made by protoc `version` ("3.21.12", "27.2")."""
    parts = [int(p) for p in re.findall(r"\d+", version)[:3]]
    if parts[0] == 3:  # protoc 3.20.x pairs with Python 3.20.x, 3.21.x with 4.21.x
        if parts[1] < 20:
            raise RuntimeError(
                f"protoc {version} is too old: tensord's stubs need protoc >= 3.20")
        python = [3 if parts[1] == 20 else 4] + parts[1:]
    else:  # protoc 22-25 pair with Python 4.x, 26-29 with 5.x, 30-33 with 6.x
        python = [4 + (parts[0] - 22) // 4] + parts
    floor = ".".join(str(p) for p in python)
    return f"protobuf>={floor},<{python[0] + 1}"


class Generator:
    """One way to run protoc with the gRPC Python plugin."""

    def __init__(self, name, command, requirements):
        self.name = name
        self._command = command
        self._requirements = requirements

    def requirements(self):
        return list(self._requirements) + [NUMPY_REQUIREMENT]

    def generate(self, proto_root, out_dir):
        result = subprocess.run(
            self._command + [f"-I{proto_root}", f"--python_out={out_dir}",
                             f"--grpc_python_out={out_dir}", PROTO_FILE],
            capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{self.name} failed on {PROTO_FILE}:\n"
                               f"{result.stdout}{result.stderr}")
        package = os.path.join(out_dir, "tensord", "v1")
        open(os.path.join(package, "__init__.py"), "a").close()


def write_op_table(proto_root, out_dir):
    """Writes tensord/_op_table.py under out_dir: the op table's rows (OP_FACTS
    of each) as Python data, made from OP_TABLE_FILE while the wheel builds."""
    import json
    with open(os.path.join(proto_root, OP_TABLE_FILE), encoding="utf-8") as f:
        table = json.load(f)
    rows = [{k: row.get(k, row["id"] if k == "name" else None) for k in OP_FACTS}
            for row in table["ops"]]
    target = os.path.join(out_dir, "tensord", "_op_table.py")
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "w", encoding="utf-8") as f:
        f.write('"""The op table (proto/tensord/v1/ops.json), generated while the '
                'package was built: do not edit.\n\n'
                'OPS: one dict per op, in the table\'s order, with the keys of '
                'build_stubs.OP_FACTS.\n"""\n')
        f.write(f"OPS = {rows!r}\n")


def _grpc_tools_generator():
    try:
        version = metadata.version("grpcio-tools")
        import grpc_tools  # noqa: F401
    except (ImportError, metadata.PackageNotFoundError):
        return None
    pins = [r.split(";")[0].replace(" ", "") for r in metadata.requires("grpcio-tools") or []
            if r.startswith("protobuf")]
    if not pins:  # a distribution without metadata: ask its protoc
        out = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "--version"],
                             capture_output=True, text=True).stdout
        pins = [protobuf_requirement_for_protoc(out.split()[-1])]
    return Generator(f"grpcio-tools {version}",
                     [sys.executable, "-m", "grpc_tools.protoc"],
                     pins + [f"grpcio>={version}"])


def _system_generator():
    protoc = shutil.which("protoc")
    plugin = shutil.which("grpc_python_plugin")
    if protoc is None or plugin is None:
        return None
    version = subprocess.run([protoc, "--version"], capture_output=True,
                             text=True).stdout.split()[-1]
    return Generator(f"{protoc} {version} with {plugin}",
                     [protoc, f"--plugin=protoc-gen-grpc_python={plugin}"],
                     [protobuf_requirement_for_protoc(version),
                      SYSTEM_PLUGIN_GRPCIO_REQUIREMENT])


def find_generator():
    proto_root = find_proto_root()
    failures = []
    for make in (_grpc_tools_generator, _system_generator):
        generator = make()
        if generator is None:
            continue
        with tempfile.TemporaryDirectory(prefix="tensord-stubcheck-") as scratch:
            try:
                generator.generate(proto_root, scratch)
                return generator
            except RuntimeError as e:
                failures.append(str(e))
    raise RuntimeError(
        "no protoc that can compile tensord.proto: install grpcio-tools "
        "(pip install grpcio-tools) or the system protoc with its gRPC Python "
        "plugin (Debian: apt-get install protobuf-compiler protobuf-compiler-grpc)"
        + "".join("\n" + f for f in failures))
