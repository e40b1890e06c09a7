ID = "torch_cuda_preds_numpy"
LIBRARY = "torch"
ROOT_CAUSE = "API misuse"
CRASH_TYPE = "tensor on the wrong device"
ENAME = "TypeError"
SOURCE = ("authored Kaggle/course-style notebook, modelled on evaluation cells that pass GPU predictions to "
          "scikit-learn with .numpy() and no .cpu() (\"can't convert cuda:0 device type tensor to numpy\", one of "
          "the most asked PyTorch questions); data: scikit-learn's bundled 8x8 digits")
DIAGNOSIS = """The model and the test tensors are on the GPU, so preds (argmax of the logits) is a cuda tensor;
preds.numpy() raises TypeError (can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the
tensor to host memory first.). On a machine without a GPU the same notebook runs on the CPU and does not crash:
the crash exists only where the tensors live on the GPU. The fix (the target cell) calls .cpu() first."""
FIX = "target cell: preds.cpu().numpy()"
CELLS = [
    md("# Digits: train on the GPU, evaluate with scikit-learn"),
    code(1, """
import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.metrics import accuracy_score, classification_report
"""),
    code(2, """
device = 'cuda' if torch.cuda.is_available() else 'cpu'
torch.manual_seed(0)
device
"""),
    code(3, """
X, y = load_digits(return_X_y=True)
X_tr, X_te, y_tr, y_te = train_test_split(X / 16.0, y, test_size=0.25, random_state=1, stratify=y)
X_train = torch.tensor(X_tr, dtype=torch.float32, device=device)
y_train = torch.tensor(y_tr, device=device)
X_test = torch.tensor(X_te, dtype=torch.float32, device=device)
"""),
    code(4, """
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 10)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
for epoch in range(30):
    model.train()
    opt.zero_grad()
    loss = loss_fn(model(X_train), y_train)
    loss.backward()
    opt.step()
print('final train loss', round(loss.item(), 4))
"""),
    target({"buggy": """
model.eval()
with torch.no_grad():
    preds = model(X_test).argmax(dim=1)
print('test accuracy:', accuracy_score(y_te, preds.numpy()))
print(classification_report(y_te, preds.numpy()))
""", "fixed": """
model.eval()
with torch.no_grad():
    preds = model(X_test).argmax(dim=1)
print('test accuracy:', accuracy_score(y_te, preds.cpu().numpy()))
print(classification_report(y_te, preds.cpu().numpy()))
"""}),
]
