"""The bench's built-in tasks: code to complete, code asked back with one edit (a rename, or
an edit that renames nothing), free text, a repetitive session (prompts in order whose
answers repeat earlier answers' structure) and a verbatim one (answers that repeat text word
for word: files rewritten, logs quoted, requests retried). Chat prompts for all but code
completion (--chat)."""

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


def edit_prompt(source: str, request: str, what: str = "function") -> str:
    """Code in the prompt, asked back with one change: what n-gram drafting is for."""
    return (f"Here is a Python {what}:\n\n```python\n{source}```\n\n{request} "
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

# A repetitive workload, in order, as one working session sends it: answers that repeat the
# structure of earlier answers (not of their own prompt), what a memory of earlier outputs
# (suffix decoding's --draft-memory) is for. Three runs of three turns each: an agent's JSON
# tool calls over the same tools, a batch of structurally similar code requests, and one file
# edited turn after turn (each turn shows the file as the turns before left it).
AGENT_TOOLS = (
    "You are a coding agent with these tools: read_file(path), search(pattern, path), "
    "edit_file(path, old, new), run_tests(path). Reply with only a JSON list of the tool "
    'calls the task needs, in order, one object per call: {"tool": NAME, "args": {...}}.'
    "\n\nTask: ")


def agent_prompt(task: str) -> str:
    return AGENT_TOOLS + task


def dataclass_prompt(name: str, fields: str) -> str:
    return (f"Write a Python dataclass `{name}` with the fields {fields}, a `to_dict` method "
            "and a `from_dict` classmethod that parses the datetime field from ISO format. "
            "Reply with only the code in one ```python block.")


REPORT_SOURCE = '''def load_rows(path):
    rows = []
    with open(path) as f:
        for line in f:
            name, score = line.strip().split(",")
            rows.append((name, int(score)))
    return rows


def best(rows, n):
    return sorted(rows, key=lambda row: row[1], reverse=True)[:n]
'''
REPORT_SOURCE_2 = REPORT_SOURCE.replace(
    '            name, score = line.strip().split(",")\n',
    '            if not line.strip():\n                continue\n'
    '            name, score = line.strip().split(",")\n')
REPORT_SOURCE_3 = REPORT_SOURCE_2.replace(
    "def load_rows(path):\n", "def load_rows(path: str) -> list[tuple[str, int]]:\n").replace(
    "def best(rows, n):\n",
    "def best(rows: list[tuple[str, int]], n: int) -> list[tuple[str, int]]:\n")

REPETITIVE_PROMPTS = {
    "agent: rename a function": agent_prompt(
        "rename the function `load_config` to `read_config` in src/config.py and where "
        "src/app.py and src/cli.py call it, then run tests/test_config.py."),
    "agent: change a constant": agent_prompt(
        "the request timeout is 30 seconds in src/client.py and src/server.py; make it 60 in "
        "both, then run tests/test_client.py."),
    "agent: replace prints": agent_prompt(
        "find the print calls in src/worker.py and src/jobs.py, replace each with "
        "logger.info, then run tests/test_worker.py."),
    "code: dataclass Customer": dataclass_prompt(
        "Customer", "id: int, name: str, email: str and created: datetime"),
    "code: dataclass Product": dataclass_prompt(
        "Product", "id: int, title: str, price: float and added: datetime"),
    "code: dataclass Invoice": dataclass_prompt(
        "Invoice", "id: int, customer_id: int, total: float and issued: datetime"),
    "file turn 1: skip blank lines": edit_prompt(
        REPORT_SOURCE, "Make `load_rows` skip blank lines; change nothing else.", "file"),
    "file turn 2: type hints": edit_prompt(
        REPORT_SOURCE_2, "Add type hints to both functions; change nothing else.", "file"),
    "file turn 3: docstrings": edit_prompt(
        REPORT_SOURCE_3, "Add a one-line docstring to each function; change nothing else.",
        "file"),
}

# A workload of verbatim repetition, in order, as an agent loop sends it: a config file
# rewritten turn after turn (each turn shows the file as the turn before left it), tool calls,
# a log whose lines are quoted back, and requests retried as they were sent (after a timeout
# or a failed tool run, say). What is copied is text, not only structure: the file from the
# prompt, a retried answer from the memory of earlier runs.
CONFIG_SOURCE_2 = CONFIG_SOURCE.replace('"timeout": 30', '"timeout": 60')
CONFIG_SOURCE_3 = CONFIG_SOURCE_2.replace('"retries": 3', '"retries": 5')
SERVICE_LOG = """2026-11-20 09:14:02 INFO  worker-1 started job 4411 (resize_images)
2026-11-20 09:14:05 ERROR worker-1 job 4411 failed: FileNotFoundError: /data/in/photo_118.png
2026-11-20 09:14:06 INFO  worker-2 started job 4412 (send_digest)
2026-11-20 09:14:09 WARN  worker-2 job 4412 slow: smtp answered after 2.8 s
2026-11-20 09:14:11 ERROR worker-3 job 4413 failed: TimeoutError: db pool exhausted after 30 s
2026-11-20 09:14:12 INFO  worker-2 finished job 4412 in 6.1 s
2026-11-20 09:14:15 ERROR worker-1 job 4414 failed: PermissionError: /data/out is read-only
"""
FILE_TURN_1 = edit_prompt(CONFIG_SOURCE, "Change the timeout to 60 seconds; change nothing "
                          "else.", "module")
FILE_TURN_2 = edit_prompt(CONFIG_SOURCE_2, "Change the retries to 5; change nothing else.",
                          "module")
TOOL_CALLS = agent_prompt("run tests/test_config.py, then read src/config.py and src/app.py.")
QUOTE_LOG = (f"Here is a service log:\n\n```\n{SERVICE_LOG}```\n\nQuote every ERROR line "
             "exactly as it is written, one per line, in one ``` block, and nothing else.")
VERBATIM_PROMPTS = {
    "file turn 1: timeout": FILE_TURN_1,
    "tool calls: run the tests": TOOL_CALLS,
    "retry: file turn 1": FILE_TURN_1,
    "file turn 2: retries": FILE_TURN_2,
    "retry: tool calls": TOOL_CALLS,
    "quote the log's errors": QUOTE_LOG,
    "file turn 3: log level": edit_prompt(CONFIG_SOURCE_3, "Change the log level to debug; "
                                          "change nothing else.", "module"),
    "retry: quote the log's errors": QUOTE_LOG,
}
SUITES = {"code": CODE_PROMPTS, "edit": list(EDIT_PROMPTS.values()), "text": TEXT_PROMPTS,
          "repetitive": list(REPETITIVE_PROMPTS.values()),
          "verbatim": list(VERBATIM_PROMPTS.values())}
