"""What the rules are built with: `RuleContext` (everything a rule may look at), the `@rule` registry, the
library rules' helpers (facts questions, call-site glue, scikit-learn tables) and the did-you-mean policy.
The rules themselves are the modules of `crane.rules`."""
