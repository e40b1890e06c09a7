ID = "decimal_invoices_int_digits"
LIBRARY = "stdlib"
ROOT_CAUSE = "NB specific"
CRASH_TYPE = "decimal trap and integer-string limit set by an earlier cell"
ENAME = "FloatOperation"
SOURCE = ("authored accounting notebook modelled on code that traps decimal.FloatOperation to keep floats out of "
          "money sums and raises sys.set_int_max_str_digits for a long-number checksum; data synthetic")
DIAGNOSIS = """Cell 1 traps decimal.FloatOperation and raises the int/str conversion limit to 100000 digits.
The buggy target builds Decimal values from the float column amount (Decimal(x) for a float), which the trapped
FloatOperation signal turns into an exception. The fix builds them from the CSV's text. Both targets then compute
an IBAN-style mod-97 checksum over all invoice numbers joined (4800 digits), which needs the raised
int_max_str_digits limit: a copy without that setting raises ValueError (Exceeds the limit (4300 digits)) on the
fixed twin."""
FIX = "target cell: Decimal from the amount's text (dtype=str column)"
NOTES = """Risky-looking fixed twin: int() of a 4800-digit string, fine only with the earlier
sys.set_int_max_str_digits."""
MAKE_DATA = r'''
"""Synthetic invoices: 600 rows, 8-digit invoice numbers, amounts with cents."""
import os
import numpy as np
import pandas as pd

rng = np.random.default_rng(121)
os.makedirs("data", exist_ok=True)
n = 600
pd.DataFrame({"invoice": rng.integers(10_000_000, 99_999_999, n),
              "amount": [f"{v:.2f}" for v in rng.uniform(5, 5000, n)],
              "currency": "EUR"}).to_csv("data/invoices.csv", index=False)
'''
CELLS = [
    md("# Invoice totals with exact decimals"),
    code(1, """
import sys
import decimal
from decimal import Decimal
import pandas as pd

decimal.getcontext().traps[decimal.FloatOperation] = True   # no floats in money
sys.set_int_max_str_digits(100_000)                          # long checksums below
"""),
    code(2, """
inv = pd.read_csv('data/invoices.csv')
raw = pd.read_csv('data/invoices.csv', dtype={'amount': str})
inv.dtypes
"""),
    target({"buggy": """
total = sum(Decimal(x) for x in inv['amount'])
digits = ''.join(inv['invoice'].astype(str))
print(total, len(digits), int(digits) % 97)
""", "fixed": """
total = sum(Decimal(x) for x in raw['amount'])
digits = ''.join(inv['invoice'].astype(str))
print(total, len(digits), int(digits) % 97)
"""}),
]
