"""The probe's time budget for tests about facts: so large it never cuts work short. The default (50 ms) gives
later variables cheaper facts once spent, and a loaded machine spends it on anything (a first call, a swapped-in
page): tests that assert facts pass this, tests of the budget itself pass their own."""

NO_TIME_CAP = 600_000.0
