"""The bench's built-in tasks: code to complete, code asked back with one edit (a rename, or
an edit that renames nothing), and free text. Chat prompts for edits and text (--chat)."""

from __future__ import annotations

CODE_PROMPTS = [
    "def fibonacci(n):\n",
    'class Stack:\n    """A simple LIFO stack backed by a list."""\n\n    def __init__(self):\n',
    "def quicksort(items):\n    \"\"\"Sort a list with quicksort and return a new list.\"\"\"\n",
]

EDIT_SOURCE = '''def summarize_orders(orders, tax_rate):
    total = 0.0
    count = 0
    largest = None
    for order in orders:
        if order.get("cancelled"):
            continue
        amount = order["price"] * order["quantity"]
        if order.get("discount"):
            amount -= amount * order["discount"]
        total += amount
        count += 1
        if largest is None or amount > largest:
            largest = amount
    tax = total * tax_rate
    average = total / count if count else 0.0
    return {"total": total, "tax": tax, "count": count,
            "average": average, "largest": largest,
            "grand_total": total + tax}
'''
CLASS_SOURCE = '''class Inventory:
    def __init__(self):
        self.items = {}

    def add(self, name, quantity):
        self.items[name] = self.items.get(name, 0) + quantity

    def remove(self, name, quantity):
        if self.items.get(name, 0) < quantity:
            raise ValueError(f"not enough {name}")
        self.items[name] -= quantity
        if self.items[name] == 0:
            del self.items[name]

    def count(self, name):
        return self.items.get(name, 0)
'''

SEARCH_SOURCE = '''def binary_search(items, target):
    low, high = 0, len(items) - 1
    while low <= high:
        middle = (low + high) // 2
        if items[middle] == target:
            return middle
        if items[middle] < target:
            low = middle
        else:
            high = middle - 1
    return -1
'''
CONFIG_SOURCE = '''DEFAULTS = {
    "host": "localhost",
    "port": 8080,
    "timeout": 30,
    "retries": 3,
    "backoff": 0.5,
    "log_level": "info",
    "cache_size": 256,
}


def load_settings(overrides):
    settings = dict(DEFAULTS)
    for key, value in overrides.items():
        if key not in settings:
            raise KeyError(f"unknown setting {key}")
        settings[key] = value
    return settings
'''


def edit_prompt(source: str, request: str) -> str:
    """Code in the prompt, asked back with one change: what n-gram drafting is for."""
    return (f"Here is a Python function:\n\n```python\n{source}```\n\n{request} "
            "Reply with only the complete code in one ```python block.")


# edit tasks by name: code asked back with renames (what the lookup's rename layer is for),
# and with edits that rename nothing (an addition, type hints, a fix, new values)
EDIT_PROMPTS = {
    "rename a function": edit_prompt(
        EDIT_SOURCE, "Rewrite it with the function renamed to `order_summary`; change nothing "
        "else."),
    "rename a variable (7 uses)": edit_prompt(
        EDIT_SOURCE, "Rename the variable `total` to `subtotal` everywhere; change nothing "
        "else."),
    "rename an attribute (8 uses)": edit_prompt(
        CLASS_SOURCE, "Rename the attribute `items` to `stock` everywhere; change nothing "
        "else."),
    "add a method": edit_prompt(
        CLASS_SOURCE, "Add a method `names(self)` that returns the sorted item names, at the "
        "end of the class; change nothing else."),
    "add type hints": edit_prompt(
        EDIT_SOURCE, "Add type hints to the function's parameters and return value; change "
        "nothing else."),
    "fix a bug": edit_prompt(
        SEARCH_SOURCE, "It loops for ever when the item is missing and above the middle; fix "
        "the bug and change nothing else."),
    "change config values": edit_prompt(
        CONFIG_SOURCE, "Change the timeout to 60 seconds and the retries to 5; change nothing "
        "else."),
}
# free text, nothing to copy: where drafting by lookup has least to find
TEXT_PROMPTS = [
    "Explain in a short paragraph why the sky is blue.",
    "Write a short story, about 150 words, about a lighthouse keeper who finds a message in a "
    "bottle.",
    "What are the trade-offs between a linked list and an array? Answer in prose.",
]
SUITES = {"code": CODE_PROMPTS, "edit": list(EDIT_PROMPTS.values()), "text": TEXT_PROMPTS}
