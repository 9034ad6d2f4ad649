#!/usr/bin/env python3
"""The reference renderer for tokenloom's chat templates: Jinja2 configured as Hugging Face
transformers configures it (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loopcontrols, tojson with ensure_ascii=False and its indent/separators/sort_keys options,
raise_exception, strftime_now), with messages adapted as vLLM adapts them (text parts joined
with newlines for string-content templates, string content as one text part for templates that
loop over content, tool call arguments parsed from JSON), and
continue_final_message applied as transformers applies it.

Writes a JSON list of cases: every conversation of conversations.json through every template
given, plus each feature template of tests/chat/templates/ with its own variables. Each case
holds the template path, the raw request, and the expected output or the expected error
("raised" with the template's message, or "error").
"""
import argparse
import datetime
import glob
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
BOS, EOS = "<s>", "</s>"


class Raised(Exception):
    pass


def make_env():
    def raise_exception(message):
        raise Raised(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def iterates_content(env, source):
    """vLLM's content-format detection, on Jinja2's own AST: does the template loop over a
    message's content (directly or through a variable assigned from it)?"""
    ast = env.parse(source)

    def is_content(n):
        return ((isinstance(n, nodes.Getattr) and n.attr == "content") or
                (isinstance(n, nodes.Getitem) and isinstance(n.arg, nodes.Const) and
                 n.arg.value == "content"))

    names = {a.target.name for a in ast.find_all(nodes.Assign)
             if isinstance(a.target, nodes.Name) and is_content(a.node)}
    return any(is_content(f.iter) or (isinstance(f.iter, nodes.Name) and f.iter.name in names)
               for f in ast.find_all(nodes.For))


def adapt(messages, parts=False):
    out = []
    for m in messages:
        m = dict(m)
        if parts and isinstance(m.get("content"), str):
            m["content"] = [{"type": "text", "text": m["content"]}]
        elif not parts and isinstance(m.get("content"), list):
            m["content"] = "\n".join(p["text"] for p in m["content"] if p.get("type") == "text")
        if isinstance(m.get("tool_calls"), list):
            calls = json.loads(json.dumps(m["tool_calls"]))
            for c in calls:
                fn = c.get("function", {})
                if isinstance(fn.get("arguments"), str):
                    try:
                        fn["arguments"] = json.loads(fn["arguments"])
                    except ValueError:
                        pass
            m["tool_calls"] = calls
        out.append(m)
    return out


def render(env, source, req):
    tmpl = env.from_string(source)
    kwargs = {"bos_token": BOS, "eos_token": EOS}
    kwargs.update(req.get("chat_template_kwargs") or {})
    for k in ("messages", "tools", "documents", "add_generation_prompt"):
        kwargs.pop(k, None)
    parts = iterates_content(env, source)
    out = tmpl.render(messages=adapt(req["messages"], parts), tools=req.get("tools"), documents=None,
                      add_generation_prompt=req.get("add_generation_prompt", False), **kwargs)
    if req.get("continue_final_message"):
        final = req["messages"][-1]["content"]
        if isinstance(final, list):
            final = final[-1]["text"]
        try:
            out = out[: out.rindex(final) + len(final)]
        except ValueError:
            final = final.strip()
            out = out[: out.rindex(final) + len(final)]
    return out


def case(env, path, name, req):
    c = {"template": path, "conversation": name, "request": req}
    try:
        with open(path, encoding="utf-8") as f:
            c["expected"] = render(env, f.read(), req)
    except Raised as e:
        c["error"] = "raised"
        c["message"] = str(e)
    except Exception as e:  # a template error in Jinja2 too: tokenloom must fail as well
        c["error"] = "error"
        c["message"] = "%s: %s" % (type(e).__name__, e)
    return c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--templates", required=True, action="append",
                    help="folder of templates (*.jinja) to run every conversation through")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    env = make_env()
    with open(os.path.join(HERE, "conversations.json"), encoding="utf-8") as f:
        conv = json.load(f)
    cases = []
    paths = sorted(p for d in args.templates for p in glob.glob(os.path.join(d, "*.jinja")))
    for path in paths:
        for name, req in conv["conversations"].items():
            req = dict(req)
            if isinstance(req.get("tools"), str):
                req["tools"] = conv[req["tools"]]
            cases.append(case(env, path, name, req))
    # Feature templates: each renders with the variables in its first-line comment
    # {# vars: {...} #} (default: the multi_turn conversation).
    for path in sorted(glob.glob(os.path.join(HERE, "templates", "*.jinja"))):
        with open(path, encoding="utf-8") as f:
            first = f.readline()
        req = dict(conv["conversations"]["tool_calls"])
        req["tools"] = conv["tools_weather"]
        if first.startswith("{# vars:"):
            req.update(json.loads(first[len("{# vars:"):].rsplit("#}", 1)[0]))
        cases.append(case(env, path, "features", req))
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
    bad = sum(1 for c in cases if "error" in c)
    print("oracle: %d cases (%d expected errors)" % (len(cases), bad), file=sys.stderr)


if __name__ == "__main__":
    main()
