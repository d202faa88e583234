"""clef_prof.base.redact, rule by rule: every alternative of every pattern has a case that only it
catches (the case fails when the alternative is dropped: `hf_` tokens, the secret word `cookie`,
Slack tokens, ...), the rule that fires is named, a second pass changes nothing, and names that
analysis reads (stage, NVTX domain, kernel and API names, Python paths) pass untouched.
The same secrets are planted in real exports in tests/analyze/test_scrub.py."""
from __future__ import annotations

import re

import pytest

from clef_prof.base.redact import PSEUDONYM, REMOVED, Pseudonyms, exe_name, redact_args, redact_text

# (rule that fires first, text, the secret that must leave it)
CASES = [
    # key-like tokens, one per alternative
    ("key-token", "token hf_QwErTyUiOpAsDfGhJkLz here", "hf_QwErTyUiOpAsDfGhJkLz"),
    ("key-token", "login with hf_ab12cd34 now", "hf_ab12cd34"),                           # a short hf_ token
    ("key-token", "use sk-proj-AbCdEfGhIjKlMnOpQr", "sk-proj-AbCdEfGhIjKlMnOpQr"),
    ("key-token", "stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    ("key-token", "restricted rk_test_51HqLyjWDarjtT1zdp7", "rk_test_51HqLyjWDarjtT1zdp7"),
    ("key-token", "hook whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
    ("key-token", "aws AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("key-token", "sts ASIAIOSFODNN7EXAMPLE", "ASIAIOSFODNN7EXAMPLE"),
    ("key-token", "git ghp_0123456789abcdefghijABCDEFGHIJ", "ghp_0123456789abcdefghijABCDEFGHIJ"),
    ("key-token", "git github_pat_11ABCDEFG0123456789_abcdefghij", "github_pat_11ABCDEFG0123456789_abcdefghij"),
    ("key-token", "slack xoxb-1234567890-abcdefghijk", "xoxb-1234567890-abcdefghijk"),
    ("key-token", "slack app xapp-1-A0123456789-abcdef", "xapp-1-A0123456789-abcdef"),
    ("key-token", "gitlab glpat-AbCdEfGhIjKlMnOpQrSt", "glpat-AbCdEfGhIjKlMnOpQrSt"),
    ("key-token", "runner glrt-2CR8_eVxiioB1QmzPZwa done", "glrt-2CR8_eVxiioB1QmzPZwa"),
    ("key-token", "register GR1348941AbCdEfGhIjKlMnOpQr", "GR1348941AbCdEfGhIjKlMnOpQr"),
    ("key-token", "npm npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"),
    ("key-token", "pypi pypi-AgEIcHlwaS5vcmcCJGFiY2RlZmdoLWlqa2wtbW5vcA", "pypi-AgEIcHlwaS5vcmcCJGFiY2RlZmdoLWlqa2wtbW5vcA"),
    ("key-token", "maps AIzaSyA1234567890abcdefghijklmnopqrstuv", "AIzaSyA1234567890abcdefghijklmnopqrstuv"),
    ("key-token", "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP",
     "eyJzdWIiOiIxMjM0NTY3ODkwIn0"),
    ("long-hex", "digest 0123456789abcdef0123456789abcdef0123 ok", "0123456789abcdef0123456789abcdef0123"),
    ("long-base64", "blob QWxhZGRpbjpvcGVuIHNlc2FtZQ1234567890abcdEF end", "QWxhZGRpbjpvcGVuIHNlc2FtZQ1234567890abcdEF"),
    # headers
    ("header", "curl -H 'Authorization: Bearer abcDEFghi123' http://x", "abcDEFghi123"),
    ("header", "Authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
    ("header", "Proxy-Authorization: Digest username-proxy-pw", "username-proxy-pw"),
    ("header", "x-api-key: apikeyvalue42", "apikeyvalue42"),
    ("header", "Cookie: sid=cookievalue42; theme=dark", "cookievalue42"),
    # passwords in URLs and command lines
    ("url-password", "dsn postgres://app:pgPassw0rd42@db:5432/main", "pgPassw0rd42"),
    ("url-password", "cache redis://:redisPw42@cache:6379/0", "redisPw42"),
    ("url-password", "fetch https://alice:httpsPw42@example.org/x", "httpsPw42"),
    ("curl-user", "curl -u alice:curlPw42 https://x", "curlPw42"),
    ("curl-user", "curl --user=alice:curlPw43 https://x", "curlPw43"),
    ("mysql-password", "mysql -u root -pMysqlPw42 shop", "MysqlPw42"),
    ("mysql-password", "mysqldump -h db -pDumpPw42 shop", "DumpPw42"),
    # secret-named flags, one per secret word (the flag's value leaves)
    ("secret-flag", "serve --token tokval42", "tokval42"),
    ("secret-flag", "serve --client-secret secval42", "secval42"),
    ("secret-flag", "serve --password -DashPw42 --port 80", "-DashPw42"),
    ("secret-flag", "serve --db-pwd pwdval42", "pwdval42"),
    ("secret-flag", "serve --api-key=keyval42", "keyval42"),
    ("secret-flag", "serve --credentials credval42", "credval42"),
    ("secret-flag", "serve --auth authval42", "authval42"),
    ("secret-flag", "curl --cookie cookieval42 http://x", "cookieval42"),
    ("secret-flag", "serve --session sessval42", "sessval42"),
    # assignments and key-value pairs
    ("assignment", "run with MY_VAR=envval42 ok", "envval42"),
    ("assignment", "login password=hunter2 ok", "hunter2"),
    ("assignment", "aws_secret_access_key = awsIniVal42", "awsIniVal42"),
    ("assignment", "set session_cookie=sesscookie42 ok", "sesscookie42"),
    ("key-value", '{"password": "jsonPw42", "user": "bob"}', "jsonPw42"),
    ("key-value", "db:\n  password: yamlPw42\n  port: 5432", "yamlPw42"),
    ("url-encoded", "GET /cb?next=%2Fhome&access_token%3DencTok42%26x%3D1", "encTok42"),
    ("url-encoded", "redirect password%253DdoubleEnc42%2526a", "doubleEnc42"),
    ("signature", "https://a.blob.core.windows.net/c/b?sv=2020-08-04&sig=AzureSig42%2Bx%3D&se=2030", "AzureSig42"),
    ("signature", "https://s3.amazonaws.com/b/k?X-Amz-Signature=amzSig42&X-Amz-Date=1", "amzSig42"),
    # private keys: a whole block, and the last line(s) before END without the rest
    ("private-key", "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\npemTail42Q==\n-----END RSA PRIVATE KEY-----",
     "pemTail42Q"),
    ("private-key", "Zm9vYmFyQmF6pemLast42==\n-----END PRIVATE KEY-----", "pemLast42"),
    ("private-key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\ncutShort42", "cutShort42"),
    # user names in home folders (backtraces, module paths)
    ("user-path", "/home/alice42/venv/lib/python3.10/site-packages/torch/nn/modules/module.py:1501", "alice42"),
    ("user-path", "File /Users/bob42/src/app.py, line 3", "bob42"),
    ("user-path", "C:\\Users\\carol42\\app\\serve.py", "carol42"),
    # whole values: an environment block, an environment-style assignment
    ("env-block", "HF_TOKEN=envblock42\x00PATH=/usr/bin", "envblock42"),
    ("assignment", "OPENAI_API_KEY=leading42", "leading42"),
    ("assignment", "hf_token=lowerleading42", "lowerleading42"),
]

# names that analysis reads or shows: they must pass untouched
BENIGN = ["parse", "index", "transfer", "head", "encode", "pooler n=16", "pooler", "clef", "Python Backtrace",
          "NSys PySampling", "Python Periodic Sampling", "cudaMemcpyAsync_v3020", "cudaLaunchKernel_v7000",
          "cuKernelGetName", "cudaGraphLaunch_v10000", "pthread_cond_signal",
          "void at::native::(anonymous namespace)::key_padding_mask_kernel<float>(int, float*)",
          "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_",
          "tokenizer::encode", "hf_hub_download", "hf_transfer", "hf_fp16", "tokenize", "session_start",
          "/usr/lib/python3.10/site-packages/tokenizers/__init__.py:42", "key == 3", "pooler-worker",
          "/root/.cache/torch/kernels", "ampere_sgemm_128x64_tn", "Memcpy HtoD (Pinned -> Device)",
          "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"]


@pytest.mark.parametrize("rule, text, secret", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_each_rule_removes_its_secret(rule, text, secret):
    assert secret in text
    out, rules = redact_text(text)
    assert secret not in out, out
    assert rules and rules[0] == rule, rules
    assert REMOVED in out or PSEUDONYM.search(out), out
    assert redact_text(out) == (out, []), "a second pass changes nothing"


def test_a_rule_keeps_what_is_not_secret():
    """Only the value goes: the header name and scheme, the URL's user and host, the flag, the
    JSON quotes, the other query parameters stay."""
    assert redact_text("curl -H 'Authorization: Bearer abc123xyz' http://x")[0] == \
        f"curl -H 'Authorization: Bearer {REMOVED}' http://x"
    assert redact_text("postgres://app:pw42@db:5432/main")[0] == f"postgres://app:{REMOVED}@db:5432/main"
    assert redact_text("redis://:pw42@cache:6379")[0] == f"redis://:{REMOVED}@cache:6379"
    assert redact_text('{"password": "pw42", "user": "bob"}')[0] == f'{{"password": "{REMOVED}", "user": "bob"}}'
    assert redact_text("a?sv=1&sig=s42&se=2")[0] == f"a?sv=1&sig={REMOVED}&se=2"
    assert redact_text("mysql -u root -ppw42 shop")[0] == f"mysql -u root -p{REMOVED} shop"
    assert redact_text("serve --password -pw42 --port 80")[0] == f"serve --password {REMOVED} --port 80"


@pytest.mark.parametrize("text", BENIGN)
def test_names_analysis_reads_pass_untouched(text):
    assert redact_text(text) == (text, [])


def test_request_ids_become_stable_pseudonyms():
    """One Pseudonyms per capture: the same id, the same pseudonym in every value; different ids,
    different pseudonyms; the cut mark `...` and the message around the ids stay."""
    names = Pseudonyms()
    a, rules = redact_text("pooler n=3 rid=embd-0123456789abcdef0123456789abcdef,r2,r3", names)
    b, _ = redact_text("pooler n=2 rid=r3,embd-0123456789abcdef0123456789abcdef,...", names)
    c, _ = redact_text("done request_id=r2", names)
    assert rules == ["request-id"]
    assert a == "pooler n=3 rid=[rid-1],[rid-2],[rid-3]"
    assert b == "pooler n=2 rid=[rid-3],[rid-1],..."
    assert c == "done request_id=[rid-2]"
    assert redact_text(a, names) == (a, []) and redact_text(a) == (a, [])          # pseudonyms stay
    # a new capture numbers anew; without a shared map, each value on its own
    assert redact_text("rid=x9", Pseudonyms())[0] == "rid=[rid-1]"
    # the user names of home folders: stable and distinct in the same way
    p, _ = redact_text("/home/alice/a.py /home/bob/b.py /home/alice/c.py", names)
    assert p == "/home/[user-1]/a.py /home/[user-2]/b.py /home/[user-1]/c.py"
    assert re.fullmatch(PSEUDONYM, "[rid-12]") and not PSEUDONYM.fullmatch("[removed]")


def test_command_lines_are_seen_whole():
    """redact_args: a value after a secret flag (even one starting with a dash), and the
    passwords of mysql -p and curl -u, which only their command makes secret."""
    assert redact_args(["mysql", "-uroot", "-pArgPw42", "shop"]) == ["mysql", "-uroot", f"-p{REMOVED}", "shop"]
    assert redact_args(["curl", "-u", "a:ArgPw43", "http://x"]) == ["curl", "-u", f"a:{REMOVED}", "http://x"]
    assert redact_args(["tool", "--password", "-ArgPw44", "--port", "80"]) == \
        ["tool", "--password", REMOVED, "--port", "80"]
    assert redact_args(["tool", "--api-key", "--port", "80"]) == ["tool", "--api-key", "--port", "80"]
    assert redact_args(["python", "-p", "8000", "/home/alice/app.py"]) == ["python", "-p", "8000", "/home/[user-1]/app.py"]
    assert exe_name("/home/alice/venv/bin/python3 -m x --token y") == "python3"


@pytest.mark.parametrize("line, name", [
    ("/usr/bin/python3 -m vllm.entrypoints.openai.api_server --api-key abc", "python3"),
    ("python3", "python3"),
    ("  /opt/venv/bin/vllm\x00serve\x00model", "vllm"),            # NUL-separated as nsys stores it
    ("/opt/bin/ --flag", "bin"),                                     # a trailing slash is dropped
    ("g++-12 -O2 x.cc", "g++-12"),
    ("./run.sh a b", "run.sh"),
    ("-m x", "process"),                                            # not a program name: starts with a dash
    ("/tmp/$(id) x", "process"),                                    # characters no program name has
    ("/home/u/" + "program_" * 9 + " x", ("program_" * 9)[:64]),   # base names are cut at 64
    ("/tmp/0123456789abcdef0123456789abcdef --x", "process"),       # a plain name, but a 32-digit hex key
    ("hf_QwErTyUiOpAsDfGhJkLz serve", "process"),                   # a plain name that is a token
    ("", "process"), ("   ", "process"), (None, "process"), (42, "process"), (b"python3", "process"),
])
def test_exe_name_keeps_the_program_name_only(line, name):
    assert exe_name(line) == name


@pytest.mark.parametrize("argv, want", [
    # --flag value: the value (whole, blanks and all) goes; the flag stays
    (["srv", "--token", "two words"], ["srv", "--token", REMOVED]),
    (["srv", "--auth-key", "x"], ["srv", "--auth-key", REMOVED]),
    (["srv", "-password", "s3cr3t", "--port", "80"], ["srv", "-password", REMOVED, "--port", "80"]),
    # --flag=value: quoted or not, blanks or not
    (["srv", "--api-key=abc"], ["srv", f"--api-key={REMOVED}"]),
    (["srv", "--api-key=two words"], ["srv", f"--api-key={REMOVED}"]),
    (["srv", '--session="a b"'], ["srv", f"--session={REMOVED}"]),
    # a flag named without a secret word keeps its value, even when the value holds one
    (["srv", "--mode=secretive", "--model", "keyword-llm"], ["srv", "--mode=secretive", "--model", "keyword-llm"]),
    # NAME=value: the value goes, lower-case names too
    (["env", "FOO=two words", "mode=fast", "cmd"], ["env", f"FOO={REMOVED}", f"mode={REMOVED}", "cmd"]),
    # an argument that holds a NUL is one argument (the NUL becomes a blank)
    (["echo", "a\x00b"], ["echo", "a b"]),
    ([], []),
])
def test_redact_args_exact(argv, want):
    assert redact_args(argv) == want
    assert redact_args(want) == want                                 # a second pass changes nothing


@pytest.mark.parametrize("text, want", [
    # the value after a secret-named flag in free text: quoted values keep their quotes
    ('run --token "two words" now', f'run --token "{REMOVED}" now'),
    ("run --token 'a b' now", f"run --token '{REMOVED}' now"),
    ('run --token "" now', f'run --token "{REMOVED}" now'),
    ("run --token x now", f"run --token {REMOVED} now"),            # one character: no quotes to keep
    ('run --token " now', f"run --token {REMOVED} now"),            # a lone quote is a value, not quotes
    ('run --token "abc now', f"run --token {REMOVED} now"),         # opened, never closed
    ("run --password abca now", f"run --password {REMOVED} now"),   # first = last character, not a quote
    ("run --password=xyzzy now", f"run --password={REMOVED} now"),
])
def test_secret_flag_values_in_text(text, want):
    out, rules = redact_text(text)
    assert out == want and rules == ["secret-flag"]
    assert redact_text(out) == (out, [])


def test_removed_and_empty_stay():
    assert redact_text(REMOVED) == (REMOVED, [])
    assert redact_text("") == ("", [])
    assert redact_text(f'"{REMOVED}"') == (f'"{REMOVED}"', [])


def test_a_user_is_one_pseudonym_across_home_folder_styles():
    """The pseudonym is of the name, not of the path that holds it: /home/alice, /Users/alice and
    C:\\Users\\alice are one user."""
    out, rules = redact_text(r"/home/alice/a /Users/alice/b C:\Users\alice\c /home/bob/d")
    assert out == r"/home/[user-1]/a /Users/[user-1]/b C:\Users\[user-1]\c /home/[user-2]/d"
    assert rules == ["user-path"]
