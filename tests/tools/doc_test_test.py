"""Unit tests of tools/doc-test, the runner of the docs' fenced blocks: which blocks it finds,
what its markers ask, what it refuses (unlabeled fences, indented code, stray or unknown
markers), and, on a made-up checkout, what a run reports: passed, failed, timeout and skipped
blocks with their reasons, the files a block left behind, the last line and the exit status."""
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

DOC_TEST = os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "tools",
                        "doc-test")


def load_doc_test():
    loader = importlib.machinery.SourceFileLoader("doc_test", DOC_TEST)
    spec = importlib.util.spec_from_loader("doc_test", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


dt = load_doc_test()

DOC = """# A doc

Some prose.

```sh
echo plain
```

<!-- doc-test: skip: needs two hosts -->
```sh
ssh elsewhere true
```

<!-- doc-test: budget=120 -->
<!-- doc-test: nproc=2 -->
```python
print("hi")
```

```text
not run
```

```c++
int main() {}
```

- a list item

      indented inside a list: not a code block
"""


class ExtractTest(unittest.TestCase):
    def test_languages_and_markers(self):
        blocks = dt.extract("doc.md", DOC)
        self.assertEqual([(b.line, b.lang) for b in blocks],
                         [(5, "sh"), (10, "sh"), (16, "python"), (20, "text"), (24, "c++")])
        plain, skipped, launched, text, cpp = blocks
        self.assertTrue(plain.runs and not plain.skip and plain.error is None)
        self.assertEqual(plain.code, "echo plain\n")
        self.assertEqual(plain.budget, dt.DEFAULT_BUDGET_S)
        self.assertEqual(skipped.skip, "needs two hosts")
        self.assertEqual((launched.budget, launched.nproc), (120.0, 2))  # two marker lines
        self.assertFalse(text.runs or cpp.runs)
        self.assertIsNone(text.error)

    def test_problems_are_errors(self):
        cases = {
            "```\nls\n```\n": "unlabeled fence",
            "text\n\n    ls -l\n\nmore\n": "indented code block",
            "<!-- doc-test: skip: why -->\n\n```sh\nls\n```\n": "not on the line just before",
            "<!-- doc-test: bugdet=5 -->\n```sh\nls\n```\n": "unknown directive 'bugdet=5'",
            "<!-- doc-test: budget=soon -->\n```sh\nls\n```\n": "not a number",
            "<!-- doc-test: skip: -->\n```sh\nls\n```\n": "without a reason",
            "<!-- doc-test: nproc=2 -->\n```sh\nls\n```\n": "nproc=N is for python",
            "<!-- doc-test skip -->\n```sh\nls\n```\n": "is not <!-- doc-test: ... -->",
            "```sh\nls\n": "never closed",
        }
        for text, needle in cases.items():
            with self.subTest(text=text):
                errors = [b.error for b in dt.extract("d.md", text) if b.error]
                self.assertEqual(len(errors), 1, errors)
                self.assertIn(needle, errors[0])

    def test_longer_fences_and_indented_fences(self):
        blocks = dt.extract("d.md", "````sh\n```\necho in\n```\n````\n\n1. step\n\n   ```sh\n"
                                    "   echo listed\n   ```\n")
        self.assertEqual([b.code for b in blocks], ["```\necho in\n```\n", "echo listed\n"])

    def test_select_by_line(self):
        with tempfile.TemporaryDirectory() as root:
            with open(os.path.join(root, "doc.md"), "w") as f:
                f.write(DOC)
            self.assertEqual([b.line for b in dt.select(root, ["doc.md:10"])], [10])
            with self.assertRaisesRegex(SystemExit, "no fenced block opens on doc.md:11"):
                dt.select(root, ["doc.md:11"])


class RunTest(unittest.TestCase):
    """tools/doc-test on a made-up checkout (a git repository of its own)."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.root = self.dir.name
        subprocess.run(["git", "init", "-q", self.root], check=True)
        with open(os.path.join(self.root, "README.md"), "w") as f:
            f.write("""# Made up

```sh
echo "TMPDIR is $TMPDIR"; test -d "$TMPDIR"; test -z "$(ls -A "$TMPDIR")"
test -f README.md                 # runs in the checkout root
echo made > left-by-block.txt
```

```sh
echo "about to fail"
false
echo "not reached"
```

<!-- doc-test: budget=1 -->
```sh
sleep 30
```

<!-- doc-test: skip: needs a GPU -->
```python
import cuda_only
```

```python
import sys
print("python", sys.version_info[0])
```
""")

    def tearDown(self):
        self.dir.cleanup()

    def doc_test(self, *args):
        return subprocess.run([sys.executable, DOC_TEST, f"--root={self.root}", *args],
                              capture_output=True, text=True, timeout=120)

    def test_report(self):
        r = self.doc_test()
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        lines = r.stdout.rstrip("\n").split("\n")
        self.assertEqual(lines[-1], "2 passed, 2 failed, 1 skipped")
        rows = {l.split()[0]: l.split() for l in lines if l.startswith("README.md:")}
        self.assertEqual(rows["README.md:3"][1:3], ["sh", "passed"])
        self.assertEqual(rows["README.md:9"][2], "failed")
        self.assertIn("exit status 1 at README.md:11: false", r.stdout)  # the doc's line
        self.assertNotIn("not reached", r.stdout)
        self.assertEqual(rows["README.md:16"][2], "timeout")
        self.assertIn("ran past its budget of 1 s", r.stdout)
        self.assertEqual(rows["README.md:21"][2], "skipped")
        self.assertEqual(rows["README.md:25"][1:3], ["python", "passed"])
        self.assertIn("skipped blocks:\n  README.md:21: needs a GPU", r.stdout)
        # The failed block's output comes with it.
        self.assertIn("--- README.md:9 failed; the last lines of its output:\n    about to fail",
                      r.stdout)
        # What a block leaves in the checkout (and names) is removed, and said.
        self.assertFalse(os.path.exists(os.path.join(self.root, "left-by-block.txt")))
        self.assertIn("README.md:3: removed left-by-block.txt", r.stdout)

    def test_one_block_and_list(self):
        r = self.doc_test("README.md:25")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.rstrip("\n").split("\n")[-1], "1 passed, 0 failed, 0 skipped")
        r = self.doc_test("--list")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("needs a GPU", r.stdout)
        self.assertIn("5 blocks: 4 to run, 1 skipped, 0 with errors", r.stdout)
        self.assertFalse(os.path.exists(os.path.join(self.root, "left-by-block.txt")))  # not run

    def test_usage_errors(self):
        self.assertEqual(self.doc_test("README.md:4").returncode, 2)
        self.assertEqual(self.doc_test("missing.md").returncode, 2)


if __name__ == "__main__":
    unittest.main()
