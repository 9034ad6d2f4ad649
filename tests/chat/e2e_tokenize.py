#!/usr/bin/env python3
"""End to end: a server serving a model that carries each real chat template in its GGUF
(tokenizer.chat_template, set on a copy of llama-2-tiny-random made in a temporary folder) must
tokenize every conversation of conversations.json (POST /tokenize with messages, tools, ...)
into exactly the tokens of Jinja2's rendering (oracle.py, transformers' configuration) tokenized
by the same server with special tokens parsed and none added; a conversation the template
refuses gets a 400 carrying the template's raise_exception message. Also: /v1/models names the
template, --chat-template-file and --chat-template override the GGUF's, a GGUF template that does
not parse stops the server with its line and column, and a chat completion's prompt_tokens
agree with /tokenize. Prints TAP.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import oracle  # noqa: E402
import gguf_set_template  # noqa: E402

BIN = os.environ.get("TL_BIN", "build/tokenloom")
SHARED = os.environ.get("TL_SHARED", os.path.join(HERE, "..", "..", "..", "shared"))
BASE_MODEL = os.path.join(SHARED, "models", "llama-2-tiny-random.gguf")
TEMPLATES = os.path.join(SHARED, "templates")

n_test = 0
failures = 0


def report(ok, name, *details):
    global n_test, failures
    n_test += 1
    print("%s %d - %s" % ("ok" if ok else "not ok", n_test, name))
    if not ok:
        failures += 1
        for d in details:
            for line in str(d).splitlines()[:12]:
                print("# " + line)
    sys.stdout.flush()


class Server:
    def __init__(self, model, tmp, *extra):
        self.log = open(os.path.join(tmp, "server.log"), "w+")
        env = dict(os.environ, TOKENLOOM_LOG="info")
        self.proc = subprocess.Popen([BIN, "serve", "-m", model, "--port", "0", "-t", "1"] +
                                     list(extra), stdout=self.log, stderr=subprocess.STDOUT,
                                     env=env)
        self.port = None
        deadline = time.time() + 60
        while time.time() < deadline and self.proc.poll() is None:
            self.log.seek(0)
            m = re.search(r"ready: .*http://[^:]+:(\d+)", self.log.read())
            if m:
                self.port = int(m.group(1))
                return
            time.sleep(0.05)

    def output(self):
        self.log.seek(0)
        return self.log.read()

    def post(self, path, body):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path),
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def get(self, path):
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.port, path), timeout=60) as r:
            return json.loads(r.read())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def request_body(req):
    body = {"messages": req["messages"]}
    for k in ("tools", "add_generation_prompt", "continue_final_message", "chat_template_kwargs"):
        if k in req:
            body[k] = req[k]
    if "add_generation_prompt" not in body:
        body["add_generation_prompt"] = False
    return body


def check_template(env, conv, path, tmp, matched):
    name = os.path.basename(path)
    model = os.path.join(tmp, "model.gguf")
    gguf_set_template.copy_with_template(BASE_MODEL, path, model)
    srv = Server(model, tmp)
    if srv.port is None:
        report(False, "%s: server starts" % name, srv.output()[-2000:])
        srv.stop()
        return
    models = srv.get("/v1/models")["data"][0]
    report(models.get("chat_template") == "gguf" and models.get("chat_template_fallback") is False,
           "%s: /v1/models says the GGUF's template is used" % name, models)
    for cname, req in conv["conversations"].items():
        req = dict(req)
        if isinstance(req.get("tools"), str):
            req["tools"] = conv[req["tools"]]
        case = oracle.case(env, path, cname, req)
        status, got = srv.post("/tokenize", request_body(req))
        label = "%s / %s" % (name, cname)
        if "expected" in case:
            st2, want = srv.post("/tokenize", {"prompt": case["expected"],
                                               "add_special_tokens": False})
            ok = status == 200 and st2 == 200 and got.get("tokens") == want.get("tokens")
            report(ok, label + ": tokens equal Jinja2's rendering tokenized",
                   "status %d / %d" % (status, st2), json.dumps(got)[:400],
                   json.dumps(want)[:400])
        elif case["error"] == "raised":
            msg = got.get("error", {}).get("message")
            ok = status == 400 and msg == case["message"]
            report(ok, label + ": 400 with the template's message",
                   "status %d, message %r, want %r" % (status, msg, case["message"]))
        else:
            ok = status == 400
            report(ok, label + ": 400 where Jinja2 fails (%s)" % case["message"][:60],
                   "status %d %s" % (status, json.dumps(got)[:300]))
        matched[0] += ok
        matched[1] += 1
    srv.stop()


def main():
    if not os.path.exists(BASE_MODEL):
        print("1..0 # SKIP no %s" % BASE_MODEL)
        return 0
    env = oracle.make_env()
    with open(os.path.join(HERE, "conversations.json"), encoding="utf-8") as f:
        conv = json.load(f)
    names = sorted(n for n in os.listdir(TEMPLATES) if n.endswith(".jinja"))
    n_conv = len(conv["conversations"])
    print("1..%d" % (len(names) * (n_conv + 1) + 5))
    tmp = tempfile.mkdtemp(prefix="tl_chat_e2e_")
    matched = [0, 0]
    try:
        for n in names:
            check_template(env, conv, os.path.join(TEMPLATES, n), tmp, matched)
        print("# end to end: %d of %d (template, conversation) cases as Jinja2" % tuple(matched))

        # Overrides and startup errors.
        broken = os.path.join(tmp, "broken.jinja")
        with open(broken, "w") as f:
            f.write("fine\n{% for m in %}")
        bad_model = os.path.join(tmp, "bad.gguf")
        gguf_set_template.copy_with_template(BASE_MODEL, broken, bad_model)
        srv = Server(bad_model, tmp)
        rc = srv.proc.wait(timeout=60)
        out = srv.output()
        srv.stop()
        report(rc != 0 and "line 2, column 13" in out,
               "a GGUF template that does not parse stops the server naming line and column",
               "exit %s" % rc, out[-800:])
        srv = Server(bad_model, tmp, "--chat-template", "llama3")
        ok = srv.port is not None
        models = srv.get("/v1/models")["data"][0] if ok else {}
        report(ok and models.get("chat_template") == "llama3",
               "--chat-template NAME overrides a broken GGUF template", models, srv.output()[-500:])
        if ok:
            st, got = srv.post("/tokenize", {"messages": [{"role": "user", "content": "hi"}]})
            st2, want = srv.post("/tokenize", {"prompt": "<s><|start_header_id|>user<|end_header_id|>"
                                               "\n\nhi<|eot_id|><|start_header_id|>assistant"
                                               "<|end_header_id|>\n\n",
                                               "add_special_tokens": False})
            report(st == 200 and got.get("tokens") == want.get("tokens"),
                   "the built-in llama3 template renders with the vocabulary's BOS", got, want)
        else:
            report(False, "the built-in llama3 template renders with the vocabulary's BOS")
        srv.stop()
        qwen = os.path.join(TEMPLATES, "Qwen-Qwen2.5-7B-Instruct.jinja")
        srv = Server(bad_model, tmp, "--chat-template-file", qwen)
        ok = srv.port is not None
        models = srv.get("/v1/models")["data"][0] if ok else {}
        report(ok and models.get("chat_template") == "file:" + qwen,
               "--chat-template-file overrides the GGUF's template", models, srv.output()[-500:])
        if ok:
            req = conv["conversations"]["multi_turn"]
            case = oracle.case(env, qwen, "multi_turn", req)
            st, tok = srv.post("/tokenize", request_body(req))
            body = dict(request_body(req), max_tokens=2, temperature=0)
            body.pop("add_generation_prompt")
            st2, comp = srv.post("/v1/chat/completions", body)
            st3, want = srv.post("/tokenize", {"prompt": case["expected"],
                                               "add_special_tokens": False})
            report(st == 200 and st2 == 200 and
                   comp.get("usage", {}).get("prompt_tokens") == want.get("count") == tok.get("count"),
                   "a chat completion's prompt is the template's rendering (prompt_tokens)",
                   json.dumps(comp)[:300], json.dumps(want)[:200])
        else:
            report(False, "a chat completion's prompt is the template's rendering (prompt_tokens)")
        srv.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
