ID = "torch_digits_mlp_unflattened"
LIBRARY = "torch"
ROOT_CAUSE = "implementation error"
CRASH_TYPE = "tensor shape mismatch"
ENAME = "RuntimeError"
SOURCE = ("authored Kaggle/course-style notebook, modelled on PyTorch MNIST MLP tutorials whose image batches of "
          "shape (N, 1, H, W) reach nn.Linear without a flatten (a frequent 'mat1 and mat2 shapes cannot be "
          "multiplied' question); model and tensors on cuda; data: scikit-learn's bundled 8x8 digits")
DIAGNOSIS = """The images are kept as (N, 1, 8, 8) tensors on the GPU and fed straight to an MLP whose first
layer is nn.Linear(64, 128): Linear multiplies the last axis (8), so the first forward pass of the training loop
raises RuntimeError (mat1 and mat2 shapes cannot be multiplied (N*8x8 and 64x128)). The fix (the target cell)
flattens the batch with .view(len(xb), -1) before the model."""
FIX = "target cell: model(xb.view(len(xb), -1))"
CELLS = [
    md("# Digits with a small MLP in PyTorch (GPU)"),
    code(1, """
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
"""),
    code(2, """
device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
torch.manual_seed(0)
print('Using', device)
"""),
    code(3, """
digits = load_digits()
X = (digits.images / 16.0).astype(np.float32)
y = digits.target
X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)
X_train = torch.tensor(X_tr).unsqueeze(1).to(device)
y_train = torch.tensor(y_tr).to(device)
X_test = torch.tensor(X_te).unsqueeze(1).to(device)
y_test = torch.tensor(y_te).to(device)
X_train.shape, X_test.shape
"""),
    code(4, """
class MLP(nn.Module):
    def __init__(self, n_in=64, n_hidden=128, n_out=10):
        super().__init__()
        self.fc1 = nn.Linear(n_in, n_hidden)
        self.fc2 = nn.Linear(n_hidden, n_out)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))

model = MLP().to(device)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
model
"""),
    target({"buggy": """
batch_size = 64
for epoch in range(10):
    perm = torch.randperm(len(X_train), device=device)
    for i in range(0, len(X_train), batch_size):
        idx = perm[i:i + batch_size]
        xb, yb = X_train[idx], y_train[idx]
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
    print(f'epoch {epoch}: loss {loss.item():.4f}')
""", "fixed": """
batch_size = 64
for epoch in range(10):
    perm = torch.randperm(len(X_train), device=device)
    for i in range(0, len(X_train), batch_size):
        idx = perm[i:i + batch_size]
        xb, yb = X_train[idx], y_train[idx]
        optimizer.zero_grad()
        loss = criterion(model(xb.view(len(xb), -1)), yb)
        loss.backward()
        optimizer.step()
    print(f'epoch {epoch}: loss {loss.item():.4f}')
"""}),
]
