"""Metering: what requests used, what it cost, and whose budget it spent (§12).

- `usage`: token usage of an OpenAI-compatible answer or event stream;
- `budgets`: pricing, per-site spend slots, spend ratios and the budget view.
"""
