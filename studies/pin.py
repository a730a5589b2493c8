#!/usr/bin/env python3
"""Pin a finished study's arms to the settings their runs used, after a recipe's defaults changed.

A study refuses to report runs whose settings are not what their arms resolve to now (`recipe
study` compares each run's recipe.toml with the arm's settings as the recipe resolves them); when
a recipe's defaults change, every study that relied on the old ones is refused, naming each
difference ("method.queue_size: run 4096, now 1024"). This script reads those differences,
writes them into the study file as the arms' own settings (an option in the arm's `options`, a
setting in its `set`), gives the runs' records the arms' new arguments, and runs the study again:
`recipe` checks every run against the pinned arms, and the script fails unless the study then
reports every run finished with nothing to run. The runs themselves are not touched.

    python3 studies/pin.py target/release/recipe studies/light_moco_cpu.toml

Only for a study whose every run has finished (it refuses otherwise: a run started by the check
would train). Standard library only (Python 3.11: tomllib).
"""

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path


def toml_value(value):
    """A JSON value as a TOML value, inline (`none` for the recipes' "off")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}={toml_value(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"no TOML form for {value!r}")


def setting(key, value):
    """A `key=value` override as `recipe` reads it (a string bare: `none`, a weight name)."""
    text = value if isinstance(value, str) else toml_value(value)
    return f"{key}={text}"


def differences(stderr):
    """arm → {key: the run's value}, from `recipe study`'s refusal (the same for every seed)."""
    found = {}
    for m in re.finditer(r"arm `([^`]+)`, seed (\d+) \(its run's settings are not the arm's now: ", stderr):
        arm = m.group(1)
        rest = stderr[m.end():]
        # Up to the closing parenthesis of this seed's list: the next "); arm `" or ")); ".
        end = re.search(r"\)(; arm `|\); )", rest)
        body = rest[: end.start()] if end else rest
        pairs = {}
        for item in re.finditer(r"([A-Za-z0-9_.]+): run (.*?), now (.*?)(?=, [A-Za-z0-9_.]+: run |$)", body):
            pairs[item.group(1)] = json.loads(item.group(2))
        if arm in found and found[arm] != pairs:
            sys.exit(f"arm `{arm}`: its seeds' runs differ from it differently; pin by hand")
        found[arm] = pairs
    return found


def option_args(table):
    """`recipe study`'s `--key value` form of an options table, in its order."""
    args = []
    for key, value in table.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            if value:
                args.append(flag)
            continue
        args.append(flag)
        args.append(",".join(map(str, value)) if isinstance(value, list) else str(value))
    return args


def pin_arm(text, arm, pairs):
    """The study file's text with `pairs` added to the `[[arm]]` named `arm` (single-line
    `options = {...}` and `set = [...]`, as the committed study files write them)."""
    blocks = re.split(r"(?m)^(?=\[\[arm\]\])", text)
    for i, block in enumerate(blocks):
        if not re.search(rf'(?m)^name = "{re.escape(arm)}"\s*$', block):
            continue
        options = {k[len("options."):]: v for k, v in pairs.items() if k.startswith("options.")}
        sets = [setting(k, v) for k, v in pairs.items() if not k.startswith("options.")]
        if options:
            inner = ", ".join(f"{k} = {toml_value(v)}" for k, v in options.items())
            m = re.search(r"(?m)^options = \{(.*)\}[ \t]*$", block)
            if m:
                joined = f"{m.group(1).strip()}, {inner}" if m.group(1).strip() else inner
                block = block[: m.start()] + f"options = {{ {joined} }}" + block[m.end():]
            else:
                block = re.sub(r'(?m)^(recipe = ".*")$', rf"\1\noptions = {{ {inner} }}", block, count=1)
        if sets:
            inner = ", ".join(json.dumps(s) for s in sets)
            m = re.search(r"(?m)^set = \[(.*)\][ \t]*$", block)
            if m:
                joined = f"{m.group(1).strip()}, {inner}" if m.group(1).strip() else inner
                block = block[: m.start()] + f"set = [{joined}]" + block[m.end():]
            else:
                block = block.rstrip("\n") + f"\nset = [{inner}]\n"
                if i + 1 < len(blocks):
                    block += "\n"
        blocks[i] = block
        return "".join(blocks)
    sys.exit(f"no [[arm]] named `{arm}` in the study file")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    recipe, path = sys.argv[1], Path(sys.argv[2])
    study = tomllib.loads(path.read_text())
    directory = path.with_suffix("")
    for arm in study["arm"]:
        for seed in study["seeds"]:
            record = directory / "runs" / arm["name"] / f"seed-{seed}.json"
            if not record.is_file() or json.loads(record.read_text()).get("result") is None:
                sys.exit(f"{record}: not a finished run; pin only a study whose runs all finished")
    first = subprocess.run([recipe, "study", str(path)], capture_output=True, text=True)
    if first.returncode == 0:
        print(f"{path}: every run already resolves to its arm; nothing to pin")
        return
    found = differences(first.stderr)
    if not found:
        sys.exit(f"`recipe study` refused for another reason:\n{first.stderr}")
    text = path.read_text()
    for arm, pairs in found.items():
        text = pin_arm(text, arm, pairs)
        print(f"arm `{arm}`: pinned " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in pairs.items()))
    study = tomllib.loads(text)
    path.write_text(text)
    for arm in study["arm"]:
        args = [arm["recipe"], *option_args(study.get("options", {})),
                *option_args(arm.get("options", {})), *arm.get("set", [])]
        for seed in study["seeds"]:
            record = directory / "runs" / arm["name"] / f"seed-{seed}.json"
            data = json.loads(record.read_text())
            data["definition"]["args"] = args
            record.write_text(json.dumps(data, indent=2))
    again = subprocess.run([recipe, "study", str(path)], capture_output=True, text=True)
    if again.returncode != 0 or "every run finished" not in again.stdout:
        sys.exit(f"the pinned study is still refused:\n{again.stderr}{again.stdout}")
    print(f"{path}: pinned; `recipe study` checks every run against it: {again.stdout.strip()}")


if __name__ == "__main__":
    main()
