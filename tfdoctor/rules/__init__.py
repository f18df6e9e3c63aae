"""One module per rule. `tfdoctor.lint.rule.all_rules()` finds every Rule subclass here."""
