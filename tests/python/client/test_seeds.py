"""The seeds, replayed: their code cells run through tensord against a daemon with two host devices.

Contract: each cell of seed_cells.CELLS runs, in its notebook's order and in
one namespace per notebook, as Jupyter runs it (the last line's value is
displayed with repr, print()s are captured, trailing newlines do not
count, an exception prints as "Name: message" with the name of its builtin
base class: TensordError prints as the RuntimeError it is). Its source goes through SOURCE_MAPPING
and the notebook's output through OUTPUT_MAPPING first: textual
substitutions, each with the reason it is needed, so this file is the list
of seed lines that still needed an edit (test_every_mapping_is_used keeps
it free of dead entries). On a daemon without a GPU (the "host" mode) the
GPU is played by host devices: "the GPU" (cuda, cuda:0) is cpu:1 and d2l's
second GPU (cuda:1) is cpu:0, which is also where tensors without a device
go (with two host devices the host device is named cpu:0, not cpu). On a
daemon with a GPU (the "gpu" mode, GPU_MODE_*) cuda:0 is itself and d2l's
second GPU is cpu:1.
"""
import ast
import contextlib
import io
import re
import traceback

import pytest

import tensord
from seed_cells import CELLS

# The devices that play the GPUs: GPU_STAND_INS[i] plays cuda:i.
GPU_STAND_INS = ["cpu:1", "cpu:0"]

# (seed text, replacement, why), applied in one pass (a replacement is not
# substituted again), longest match first.
SOURCE_MAPPING = [
    ("import torch", "import tensord", "the package is tensord"),
    ("from torch import", "from tensord import", "the package is tensord"),
    ("torch.", "tensord.", "the package is tensord"),
    ("torch.cuda.is_available()", "True",
     "the server has no GPU; a host device plays it"),
    ("torch.cuda.device_count()", "len(GPU_STAND_INS)",
     "the server has no GPU; host devices play two (d2l's section needs two)"),
    ("torch.cuda.device(", "tensord.device(",
     "torch.cuda.device is a CUDA context manager; tensord names devices only"),
    ("f'cuda:{i}'", "GPU_STAND_INS[i]", "cuda:i is played by a host device"),
    ("'cuda'", "'cpu:1'", "the GPU is played by the host device cpu:1"),
    ('"cuda"', '"cpu:1"', "the GPU is played by the host device cpu:1"),
    ("'cuda:1'", "'cpu:0'", "the second GPU is played by the host device cpu:0"),
    ("'cpu'", "'cpu:0'", "with two host devices the host device is cpu:0"),
    (".cuda()", ".to('cpu:1')", "the GPU is played by the host device cpu:1"),
    (".cuda(1)", ".to('cpu:0')", "the second GPU is played by the host device cpu:0"),
]

OUTPUT_MAPPING = [
    ("device(type='cuda', index=0)", "device(type='cpu', index=1)", "cuda:0 is cpu:1 here"),
    ("device(type='cuda', index=1)", "device(type='cpu', index=0)", "cuda:1 is cpu:0 here"),
    ("device(type='cpu')", "device(type='cpu', index=0)", "the host device is cpu:0 here"),
    ("device='cuda:0'", "device='cpu:1'", "cuda:0 is cpu:1 here"),
    (", device='cuda:1'", "",
     "cuda:1 is cpu:0 here, a host device, which PyTorch's repr does not name"),
    ("cuda:0 and cpu!", "cpu:1 and cpu:0!", "cuda:0 is cpu:1 and the host device cpu:0 here"),
    ("on the :cpu", "on the :cpu:0", "the host device is cpu:0 here"),
    ("on:cuda:0", "on:cpu:1", "cuda:0 is cpu:1 here"),
    ("'cuda'", "'cpu:1'", "the source's 'cuda' is 'cpu:1' here"),
]


# A server with one GPU (how the GPU issue runs this file on a GPU machine):
# "the GPU" (cuda, cuda:0) is the real cuda:0, d2l's second GPU (cuda:1) is
# played by the host device cpu:1, and tensors without a device go to cpu:0.
# The entries that differ from the host mode's; the rest are the same.
GPU_MODE_STAND_INS = ["cuda:0", "cpu:1"]
GPU_MODE_SOURCE_MAPPING = [
    (old, new, why) for old, new, why in SOURCE_MAPPING
    if old not in ("'cuda'", '"cuda"', "'cuda:1'", ".cuda()", ".cuda(1)")] + [
    ("'cuda:1'", "'cpu:1'", "the second GPU is played by the host device cpu:1"),
    (".cuda(1)", ".to('cpu:1')", "the second GPU is played by the host device cpu:1"),
]
GPU_MODE_OUTPUT_MAPPING = [
    ("device(type='cuda', index=1)", "device(type='cpu', index=1)", "cuda:1 is cpu:1 here"),
    ("device(type='cpu')", "device(type='cpu', index=0)", "the host device is cpu:0 here"),
    (", device='cuda:1'", ", device='cpu:1'", "cuda:1 is cpu:1 here"),
    ("cuda:0 and cpu!", "cuda:0 and cpu:0!", "the host device is cpu:0 here"),
    ("on the :cpu", "on the :cpu:0", "the host device is cpu:0 here"),
]
# mode -> (the devices that play cuda:0 and cuda:1, source and output tables)
MODES = {"host": (GPU_STAND_INS, SOURCE_MAPPING, OUTPUT_MAPPING),
         "gpu": (GPU_MODE_STAND_INS, GPU_MODE_SOURCE_MAPPING, GPU_MODE_OUTPUT_MAPPING)}


def _apply(mapping, text):
    """`text` with the mapping's substitutions, and the seed texts that matched."""
    table = {old: new for old, new, _ in mapping}
    pattern = re.compile("|".join(re.escape(old) for old in sorted(table, key=len,
                                                                    reverse=True)))
    used = set()

    def replace(match):
        used.add(match.group(0))
        return table[match.group(0)]
    return pattern.sub(replace, text), used


def map_source(source, mode="host"):
    return _apply(MODES[mode][1], source)[0]


def map_output(output, mode="host"):
    return _apply(MODES[mode][2], output)[0]


def _builtin_name(exc):
    for cls in type(exc).__mro__:
        if cls.__module__ == "builtins":
            return cls.__name__
    return type(exc).__name__


def run_cell(source, namespace):
    """What Jupyter prints for `source` (captured stdout, then repr of a last
    expression), and the line of the cell its error was raised on (None: no
    error, or one raised outside the cell's own code, e.g. by the repr)."""
    module = ast.parse(source)
    last = None
    if module.body and isinstance(module.body[-1], ast.Expr):
        last = ast.Expression(module.body.pop().value)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(module, "<cell>", "exec"), namespace)
            if last is not None:
                value = eval(compile(last, "<cell>", "eval"), namespace)
                if value is not None:
                    print(repr(value))
    except Exception as e:  # noqa: BLE001 (the notebook shows it)
        lines = [f.lineno for f in traceback.extract_tb(e.__traceback__)
                 if f.filename == "<cell>"]
        return out.getvalue() + f"{_builtin_name(e)}: {e}", (lines[-1] if lines else None)
    return out.getvalue().rstrip("\n"), None


@pytest.fixture(scope="module")
def notebooks(daemon):
    """(the mode, seed -> that notebook's namespace): "host" on a server
    without a GPU, "gpu" on one with one or more."""
    client = tensord.connect(daemon.address)
    mode = "gpu" if client.cuda.is_available() else "host"
    stand_ins = MODES[mode][0]
    namespaces = {}
    yield mode, lambda seed: namespaces.setdefault(seed, {"GPU_STAND_INS": stand_ins})
    client.close()


def _cell_id(cell):
    return f"{cell.seed}:{cell.label}"


@pytest.mark.parametrize("cell", CELLS, ids=[_cell_id(c) for c in CELLS])
def test_cell(cell, notebooks):
    if cell.compare == "skip":
        pytest.skip(cell.why)
    mode, namespace = notebooks
    printed, error_line = run_cell(map_source(cell.source, mode), namespace(cell.seed))
    if cell.compare == "exact":
        assert printed == map_output(cell.output, mode).rstrip("\n")
    else:
        assert re.fullmatch(cell.form, printed), (printed, cell.why)
    if error_line is not None or cell.line is not None:
        # Raised where the notebook's traceback points (the pipelined client
        # plans at the line), not at a later sync point such as the repr.
        raised = re.match(r"\w+: ", printed) is not None
        assert error_line == (cell.line if raised else None), (printed, error_line)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_mapping_is_used(mode):
    """No entry of a mode's tables is dead: each is a seed line that still
    needs it (the GPU mode's tables are checked here too, without a GPU)."""
    _, source_mapping, output_mapping = MODES[mode]
    used_in_source, used_in_output = set(), set()
    for cell in CELLS:
        if cell.compare != "skip":
            used_in_source |= _apply(source_mapping, cell.source)[1]
        if cell.compare == "exact":
            used_in_output |= _apply(output_mapping, cell.output)[1]
    assert [old for old, _, _ in source_mapping if old not in used_in_source] == []
    assert [old for old, _, _ in output_mapping if old not in used_in_output] == []


def test_the_gpu_mode_keeps_the_notebooks_cuda():
    """On a GPU server the seeds' own cuda and cuda:0 stay as written, and
    what the host mode plays with cpu:1 is the real GPU."""
    assert map_source("x.cuda()\ny = x.to('cuda')", "gpu") == "x.cuda()\ny = x.to('cuda')"
    assert map_source("x.to('cuda:1')", "gpu") == "x.to('cpu:1')"
    assert map_output("tensor([1, 2], device='cuda:0')", "gpu") == \
        "tensor([1, 2], device='cuda:0')"
    assert map_output("found at least two devices, cuda:0 and cpu!", "gpu") == \
        "found at least two devices, cuda:0 and cpu:0!"
