"""The seeds' code cells and the outputs their notebooks printed, as data for test_seeds.py.

Contract: CELLS lists, in each notebook's order, the code cells of the
/work/shared/seeds notebooks 000, 002, 003 (d2l's "GPUs": its PyTorch tab,
tensor and network parts) and 004, copied verbatim: `source` is the cell's
PyTorch code, `output` what the notebook printed under it (an exception as
"Name: message"; "" when nothing). `compare` says how test_seeds.py checks
the replay:
  "exact"  the printed text equals `output` after the name mapping;
  "form"   it matches the regular expression `form` (written for the mapped
           output), because the value depends on the hardware or on random
           draws; `why` says which;
  "skip"   not replayed; `why` says why.
`line`, for a cell whose notebook shows an error: the line of the cell its
traceback points at (1-based), where the replay must raise it too.
Seed 003 is a d2l source file without printed outputs: its `output`s are
the ones d2l.ai publishes for that section (a server with two GPUs).
Nothing here talks to a server.
"""
import collections

Cell = collections.namedtuple("Cell", "seed label source output compare form why line",
                              defaults=("exact", None, "", None))

_ONES_2x3 = "tensor([[1., 1., 1.],\n        [1., 1., 1.]], device='cuda:{}')"
# A printed float, in PyTorch's scientific mode too (random values whose
# largest is over 1000 times their smallest print as 2.9003e-04).
_FLOAT = r"-?\d+\.\d+(?:e[+-]\d+)?"

CELLS = [
    # --- 000: "Usando a GPU" (Portuguese notebook) -------------------------
    Cell("000", "In [5]", "import torch", ""),
    Cell("000", "In [4]",
         "vector1 = torch.tensor([1,2,3])\n\nvector2 = torch.tensor([5,8,1])\n\n\n"
         "result = vector1 * vector2 \n\nresult",
         "tensor([ 5, 16,  3])"),
    Cell("000", "In [15]", "tensor1_gpu = vector1.cuda()", ""),
    Cell("000", "In [16]", "tensor1_gpu * vector2",
         "RuntimeError: Expected all tensors to be on the same device, but found at least "
         "two devices, cuda:0 and cpu!", line=1),
    Cell("000", "In [17]", "tensor2_gpu = vector2.cuda()", ""),
    Cell("000", "In [18]", "tensor1_gpu * tensor2_gpu",
         "tensor([ 5, 16,  3], device='cuda:0')"),
    Cell("000", "In [21]", "tensor3_gpu = torch.tensor([1,2,3] , device = 'cuda')\n\n"
         "tensor3_gpu",
         "tensor([1, 2, 3], device='cuda:0')"),
    Cell("000", "In [24]",
         "if torch.cuda.is_available():\n    device = 'cuda'\nelse:\n    device = 'cpu'\n\n\n"
         "new_gpu_tensor = torch.tensor([1,2,3,5], device = device)\n\n\nnew_gpu_tensor",
         "tensor([1, 2, 3, 5], device='cuda:0')"),

    # --- 002: "GPU Numerical Computation" (Spanish notebook) ---------------
    Cell("002", "In [1]", "!nvidia-smi", "", "skip",
         why="a shell command, not Python: the client's counterpart is client.devices()"),
    Cell("002", "In [2]", "import torch\ntorch.cuda.is_available()", "True", "form",
         r"True|False", "whether the server has a GPU"),
    Cell("002", "In [3]", 'device = "cuda" if torch.cuda.is_available() else "cpu"\ndevice',
         "'cuda'"),
    Cell("002", "In [4]", "torch.cuda.device_count()", "1", "form", r"\d+",
         "how many GPUs the server has"),
    Cell("002", "In [6]", "tns = torch.tensor([1, 2, 3])\ntns, tns.device",
         "(tensor([1, 2, 3]), device(type='cpu'))"),
    Cell("002", "In [10]", "gpu_tns = tns.to(device)\ngpu_tns",
         "tensor([1, 2, 3], device='cuda:0')"),
    Cell("002", "In [9]", "gpu_tns.device", "device(type='cuda', index=0)"),
    Cell("002", "In [11]", "cpu_tns = gpu_tns.cpu()\ncpu_tns, cpu_tns.device",
         "(tensor([1, 2, 3]), device(type='cpu'))"),
    Cell("002", "In [12]", "cpu_tns.numpy()", "array([1, 2, 3])"),
    Cell("002", "In [14]", "gpu_tns, gpu_tns.device",
         "(tensor([1, 2, 3], device='cuda:0'), device(type='cuda', index=0))"),

    # --- 003: d2l "GPUs", the PyTorch tab ----------------------------------
    Cell("003", "!nvidia-smi", "!nvidia-smi", "", "skip",
         why="a shell command, not Python: the client's counterpart is client.devices()"),
    Cell("003", "devices",
         "import torch\nfrom torch import nn\n\n"
         "torch.device('cpu'), torch.cuda.device('cuda'), torch.cuda.device('cuda:1')",
         "(device(type='cpu'), <torch.cuda.device at 0x7f1b6c1b7e50>, "
         "<torch.cuda.device at 0x7f1b6c1b7d90>)",
         "form", r"\(device\(type='cpu'[^)]*\), device\([^)]*\), device\([^)]*\)\)",
         "torch.cuda.device is a context manager whose repr is an address; tensord "
         "has no such context, so the line names tensord.device"),
    Cell("003", "device_count", "torch.cuda.device_count()", "2", "form", r"\d+",
         "how many GPUs the server has"),
    Cell("003", "try_gpu",
         "def try_gpu(i=0):  #@save\n"
         '    """Return gpu(i) if exists, otherwise return cpu()."""\n'
         "    if torch.cuda.device_count() >= i + 1:\n"
         "        return torch.device(f'cuda:{i}')\n"
         "    return torch.device('cpu')\n\n"
         "def try_all_gpus():  #@save\n"
         '    """Return all available GPUs, or [cpu(),] if no GPU exists."""\n'
         "    devices = [torch.device(f'cuda:{i}')\n"
         "             for i in range(torch.cuda.device_count())]\n"
         "    return devices if devices else [torch.device('cpu')]\n\n"
         "try_gpu(), try_gpu(10), try_all_gpus()",
         "(device(type='cuda', index=0), device(type='cpu'), "
         "[device(type='cuda', index=0), device(type='cuda', index=1)])"),
    Cell("003", "x.device", "x = torch.tensor([1, 2, 3])\nx.device", "device(type='cpu')"),
    Cell("003", "X", "X = torch.ones(2, 3, device=try_gpu())\nX", _ONES_2x3.format(0)),
    Cell("003", "Y", "Y = torch.rand(2, 3, device=try_gpu(1))\nY",
         "tensor([[0.1151, 0.7723, 0.7468],\n        [0.8366, 0.8911, 0.7256]], "
         "device='cuda:1')",
         "form", rf"tensor\(\[\[{_FLOAT}, {_FLOAT}, {_FLOAT}\],\n"
                 rf"        \[{_FLOAT}, {_FLOAT}, {_FLOAT}\]\]\)",
         "random values"),
    Cell("003", "Z", "Z = X.cuda(1)\nprint(X)\nprint(Z)",
         _ONES_2x3.format(0) + "\n" + _ONES_2x3.format(1) + "\n"),
    Cell("003", "Y + Z", "Y + Z",
         "tensor([[1.1151, 1.7723, 1.7468],\n        [1.8366, 1.8911, 1.7256]], "
         "device='cuda:1')",
         "form", rf"tensor\(\[\[{_FLOAT}, {_FLOAT}, {_FLOAT}\],\n"
                 rf"        \[{_FLOAT}, {_FLOAT}, {_FLOAT}\]\]\)",
         "Y's random values"),
    Cell("003", "Z.cuda(1) is Z", "Z.cuda(1) is Z", "True"),
    Cell("003", "net", "net = nn.Sequential(nn.Linear(3, 1))\nnet = net.to(device=try_gpu())",
         ""),
    Cell("003", "net(X)", "net(X)",
         "tensor([[0.7802],\n        [0.7802]], device='cuda:0', grad_fn=<AddmmBackward0>)",
         "form", rf"tensor\(\[\[({_FLOAT})\],\n        \[\1\]\], device='cpu:1', "
                 r"grad_fn=<AddmmBackward0>\)",
         "the layer's random initial weights (both rows equal, as X's rows are)"),
    Cell("003", "weight device", "net[0].weight.data.device", "device(type='cuda', index=0)"),

    # --- 004: "Running tensors on GPUs" (English notebook) -----------------
    Cell("004", "!nvidia-smi", "!nvidia-smi", "/bin/bash: line 1: nvidia-smi: command not found",
         "skip", why="a shell command, not Python: the client's counterpart is "
                     "client.devices()"),
    Cell("004", "is_available", "# Check for GPU\nimport torch\ntorch.cuda.is_available()",
         "True", "form", r"True|False", "whether the server has a GPU"),
    Cell("004", "device", 'device = "cuda" if torch.cuda.is_available else "cpu"\ndevice',
         "'cuda'"),
    Cell("004", "device_count", "torch.cuda.device_count()", "1", "form", r"\d+",
         "how many GPUs the server has"),
    Cell("004", "tensor.device",
         '# Create a tensor\ntensor = torch.tensor([1,2,3])\n\n'
         'print(f"Tensor is running on the :{tensor.device}")',
         "Tensor is running on the :cpu\n"),
    Cell("004", "to(device)",
         "# Move tensor to GPU (if available)\ntensor_on_gpu = tensor.to(device)\n\n"
         'print(f"Tensor is running on:{tensor_on_gpu.device}")',
         "Tensor is running on:cuda:0\n"),
    Cell("004", "numpy() on the GPU",
         "# If tensor is on GPU, can't transform it to NumPy (this will error)\n"
         "tensor_on_gpu.numpy()",
         "TypeError: can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to "
         "copy the tensor to host memory first.",
         "form", r"TypeError: can't convert cuda:\d+ device type tensor to numpy\. Use "
                 r"Tensor\.cpu\(\) to copy the tensor to host memory first\.|array\(\[1, 2, 3\]\)",
         "numpy() refuses a GPU tensor; the GPU's stand-in, a host device, may be fetched",
         line=2),
    Cell("004", "cpu().numpy()",
         "# Instead, copy the tensor back to cpu\n"
         "tensor_back_on_cpu = tensor_on_gpu.cpu().numpy()\ntensor_back_on_cpu",
         "array([1, 2, 3])"),
]
