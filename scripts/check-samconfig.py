#!/usr/bin/env python3
"""Every samconfig.toml environment's parameters against its template, offline.

Usage: check-samconfig.py SAMCONFIG TEMPLATE [SAMCONFIG TEMPLATE ...]

SAM CLI's own parser reads each environment's parameter_overrides (the ones `sam
build` and `sam deploy` will pass), and each one must be a parameter of the template
with an allowed value: AllowedValues, Number bounds, MaxLength, and AllowedPattern,
read from the template itself (the patterns are defined there, once). A
CommaDelimitedList's AllowedPattern applies to each value of the list, as
CloudFormation applies it. A value SAM would split (a space without quotes) or drop
(an empty value) is caught here, not at deploy time.

An environment whose name ends in `-template` (e.g. `prod-template`) is a template to
copy, not to deploy: a value that fails an AllowedPattern there (a documentation
placeholder) is reported, not failed. Every other check still applies to it.

Exit status 1 with one line per problem; 0 with one line per environment.
"""
import re
import shlex
import sys
import tomllib

import yaml
from samcli.cli.types import CfnParameterOverridesType

TEMPLATE_SUFFIX = "-template"


class Loader(yaml.SafeLoader):
    pass


Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


def values_of(param, value):
    """The values CloudFormation checks one by one: a list's elements, else the value."""
    if param.get("Type") == "CommaDelimitedList":
        return [v.strip() for v in value.split(",")]
    return [value]


def main(args):
    if len(args) < 2 or len(args) % 2:
        sys.exit("usage: check-samconfig.py SAMCONFIG TEMPLATE [SAMCONFIG TEMPLATE ...]")
    problems, seen = [], []
    for config, template in zip(args[0::2], args[1::2]):
        params = yaml.load(open(template), Loader=Loader)["Parameters"]
        envs = tomllib.load(open(config, "rb"))
        for env, sections in envs.items():
            if not isinstance(sections, dict):
                continue
            is_template = env.endswith(TEMPLATE_SUFFIX)
            raw = sections.get("global", {}).get("parameters", {}).get("parameter_overrides")
            if raw is None:
                problems.append(f"{config} [{env}]: no parameter_overrides in [{env}.global.parameters]")
                continue
            # What the text says, word by word (shell quoting), against what SAM reads.
            written = dict(w.split("=", 1) if "=" in w else (w, None) for w in shlex.split(raw))
            parsed = CfnParameterOverridesType().convert(raw, None, None)
            if written != parsed:
                problems.append(
                    f"{config} [{env}]: SAM CLI reads {parsed}, not what is written ({written}): "
                    "an empty value is dropped, a value with a space needs quotes"
                )
            placeholders = []
            for key, value in parsed.items():
                p = params.get(key)
                if p is None:
                    problems.append(f"{config} [{env}]: {key} is not a parameter of {template}")
                    continue
                if "AllowedValues" in p and value not in [str(v) for v in p["AllowedValues"]]:
                    problems.append(f"{config} [{env}]: {key}={value} is not one of {p['AllowedValues']}")
                if p.get("Type") == "Number":
                    try:
                        x = float(value)
                    except ValueError:
                        problems.append(f"{config} [{env}]: {key}={value} is not a number")
                        continue
                    if "MinValue" in p and x < float(p["MinValue"]) or "MaxValue" in p and x > float(p["MaxValue"]):
                        problems.append(
                            f"{config} [{env}]: {key}={value} is outside [{p.get('MinValue')}, {p.get('MaxValue')}]"
                        )
                if "AllowedPattern" in p:
                    for v in values_of(p, value):
                        if re.fullmatch(p["AllowedPattern"], v):
                            continue
                        why = p.get("ConstraintDescription", f"does not match {p['AllowedPattern']}")
                        line = f"{config} [{env}]: {key}={v}: {why}"
                        if is_template:
                            placeholders.append(line)
                        else:
                            problems.append(line)
                if "MaxLength" in p and len(value) > int(p["MaxLength"]):
                    problems.append(f"{config} [{env}]: {key}={value} is longer than {p['MaxLength']}")
            note = ""
            if is_template:
                note = f" (a template: {len(placeholders)} placeholder(s) to replace in a copy before deploying)"
            seen.append(f"check-samconfig:   {config} [{env}]: {len(parsed)} parameters{note}")
            seen.extend(f"check-samconfig:     placeholder: {line}" for line in placeholders)
    if problems:
        sys.exit("\n".join(problems))
    print("\n".join(seen))


if __name__ == "__main__":
    main(sys.argv[1:])
