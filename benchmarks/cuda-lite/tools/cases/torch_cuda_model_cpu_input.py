ID = "torch_cuda_model_cpu_input"
LIBRARY = "torch"
ROOT_CAUSE = "API misuse"
CRASH_TYPE = "tensor on the wrong device"
ENAME = "RuntimeError"
SOURCE = ("authored Kaggle/course-style notebook, modelled on inference cells that build a new input tensor "
          "on the CPU for a model moved to the GPU ('Expected all tensors to be on the same device', a frequent "
          "PyTorch forum and Stack Overflow question); data: seeded synthetic regression features")
DIAGNOSIS = """The regression model was moved to the GPU with .to(device) and trained there; the target cell builds
the features of new rows with torch.from_numpy(...).float(), which stays on the CPU, and calls model(X_new):
nn.Linear raises RuntimeError (Expected all tensors to be on the same device, but got mat1 is on cpu, different
from other tensors on cuda:0). On a machine without a GPU the whole notebook runs on the CPU and does not crash.
The fix (the target cell) moves the input with .to(device)."""
FIX = "target cell: torch.from_numpy(...).float().to(device)"
CELLS = [
    md("# House prices: a small regression network on the GPU"),
    code(1, """
import numpy as np
import torch
from torch import nn
"""),
    code(2, """
device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
rng = np.random.default_rng(42)
n, d = 2000, 12
features = rng.normal(size=(n, d)).astype(np.float32)
true_w = rng.normal(size=(d, 1)).astype(np.float32)
price = features @ true_w + 0.1 * rng.normal(size=(n, 1)).astype(np.float32)
mean, std = features.mean(axis=0), features.std(axis=0)
X = torch.from_numpy((features - mean) / std).to(device)
y = torch.from_numpy(price).to(device)
X.device, X.shape
"""),
    code(3, """
net = nn.Sequential(nn.Linear(d, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
for step in range(200):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(net(X), y)
    loss.backward()
    optimizer.step()
print(f'train MSE {loss.item():.4f}')
"""),
    target({"buggy": """
new_rows = rng.normal(size=(5, d)).astype(np.float32)
X_new = torch.from_numpy((new_rows - mean) / std).float()
net.eval()
with torch.no_grad():
    predicted = net(X_new).squeeze(1)
predicted
""", "fixed": """
new_rows = rng.normal(size=(5, d)).astype(np.float32)
X_new = torch.from_numpy((new_rows - mean) / std).float().to(device)
net.eval()
with torch.no_grad():
    predicted = net(X_new).squeeze(1)
predicted
"""}),
]
