#!/usr/bin/env python3
"""Regenerates goldens.json: the published chat templates in this folder (see SOURCES.md) rendered
over a fixed set of conversations by jinja2 configured exactly as transformers' apply_chat_template
configures it. Run from anywhere:
    python3 tests/data/templates/gen_goldens.py
Needs only `jinja2` >= 3.1 (no transformers, no network).

What transformers does (src/transformers/utils/chat_template_utils.py, _compile_jinja_template and
render_jinja_template; tokenization_utils_base.py apply_chat_template), reproduced below:
  * ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
    extensions=[AssistantTracker, jinja2.ext.loopcontrols]) -- AssistantTracker adds the
    `{% generation %}...{% endgeneration %}` block, which renders its body unchanged.
  * filters["tojson"] = json.dumps(x, ensure_ascii=False, indent=None, separators=None,
    sort_keys=False)   (no HTML escaping, unlike jinja2's own tojson)
  * globals["raise_exception"](message) raises jinja2.exceptions.TemplateError(message)
  * globals["strftime_now"](format) = datetime.now().strftime(format)   -- pinned here, see NOW
  * template.render(messages=chat, tools=tool_schemas, documents=documents,
    add_generation_prompt=add_generation_prompt, **{**tokenizer.special_tokens_map, **kwargs})
    i.e. the special tokens (bos_token, eos_token, pad_token, unk_token, ...; only the ones the
    tokenizer defines) plus every extra keyword argument of apply_chat_template (enable_thinking,
    reasoning_effort, builtin_tools, date_string, ...) become top-level template variables, and an
    explicit kwarg wins over a special token of the same name.

Every golden row records the complete set of variables handed to render() under "context"
("messages", "tools", "documents", "add_generation_prompt", the special tokens, the extras).
A row whose output depends on strftime_now carries "strftime_now": the ISO time the clock was
pinned to; a C++ test must pin its clock to the same instant (local time, as datetime.now()).
Rows where jinja2 raises carry "error" instead of "expected": fak must raise too.
"""
import json
import os
from contextlib import contextmanager
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
NOW = datetime(2025, 3, 14, 9, 26, 53)          # what strftime_now sees
OTHER_NOW = datetime(2031, 11, 2, 23, 59, 1)    # second render, to detect a dependence on the clock


class Clock:
    now = NOW


def make_env():
    class AssistantTracker(jinja2.ext.Extension):
        # transformers' extension, minus the index bookkeeping it only does when asked for an
        # assistant-token mask; rendering is identical: the block's body, unchanged.
        tags = {"generation"}

        def __init__(self, environment):
            super().__init__(environment)
            environment.extend(activate_tracker=self.activate_tracker)
            self._rendered_blocks = None
            self._generation_indices = None

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [],
                                          body).set_lineno(lineno)

        @jinja2.pass_eval_context
        def _generation_support(self, context, caller):
            return caller()

        @contextmanager
        def activate_tracker(self, rendered_blocks, generation_indices):
            yield

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return Clock.now.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = make_env()

# name -> (file, the tokenizer's special_tokens_map entries that are set, families). Families pick
# the family-specific conversations below. Only bos_token / eos_token are read by these templates.
LLAMA_TOK = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
QWEN_TOK = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
DEEPSEEK_TOK = {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}
TEMPLATES = {
    "qwen2.5-instruct": ("qwen2.5-instruct.jinja", QWEN_TOK, set()),
    "qwen3": ("qwen3.jinja", QWEN_TOK, {"thinking"}),
    "qwen3-coder-30b-a3b": ("qwen3-coder-30b-a3b.jinja", QWEN_TOK, set()),
    "qwen3-coder-30b-a3b-initial": ("qwen3-coder-30b-a3b-initial.jinja", QWEN_TOK, set()),
    "qwen3.5": ("qwen3.5.jinja", QWEN_TOK, {"thinking"}),
    "llama-3.1": ("llama-3.1.jinja", LLAMA_TOK, {"llama"}),
    "llama-3.2": ("llama-3.2.jinja", LLAMA_TOK, {"llama"}),
    "gpt-oss": ("gpt-oss.jinja", {"bos_token": "<|startoftext|>", "eos_token": "<|return|>",
                                  "pad_token": "<|endoftext|>"}, {"gpt-oss"}),
    "gemma-3": ("gemma-3.jinja", {"bos_token": "<bos>", "eos_token": "<eos>",
                                  "unk_token": "<unk>", "pad_token": "<pad>"}, set()),
    "glm-4.5": ("glm-4.5.jinja", {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
                {"thinking"}),
    "deepseek-r1": ("deepseek-r1.jinja", DEEPSEEK_TOK, set()),
    "deepseek-v3.1": ("deepseek-v3.1.jinja", DEEPSEEK_TOK, {"thinking", "deepseek"}),
    "hermes-3-tool-use": ("hermes-3-tool-use.jinja",
                          {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"}, set()),
    "mistral-nemo-2407": ("mistral-nemo-2407.jinja",
                          {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, set()),
    "devstral-small-2-2512": ("devstral-small-2-2512.jinja",
                              {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                               "pad_token": "<pad>"}, {"markup"}),
}

# ---------------------------------------------------------------------------------------------
# Tools (OpenAI shape, as apply_chat_template receives them).
WEATHER = {"type": "function", "function": {
    "name": "get_weather",
    "description": "Weather for a city — in °C",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "description": "City name"},
                                  "days": {"type": "integer", "description": "Days ahead",
                                           "default": 1},
                                  "unit": {"type": "string", "description": "Unit",
                                           "enum": ["c", "f"], "default": "c"}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Current time",
    "parameters": {"type": "object", "properties": {}}}}
SEARCH = {"type": "function", "function": {
    "name": "search_files",
    "description": "Search the repository.\n  Returns matching lines.  ",
    "parameters": {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Regular expression"},
            "paths": {"type": "array", "items": {"type": "string"},
                      "description": "Paths to search"},
            "options": {"type": "object", "description": "Flags",
                        "properties": {"case": {"type": "boolean"}, "max": {"type": "number"}},
                        "required": ["case"]},
            "target": {"description": "File id or name",
                       "oneOf": [{"type": "string"},
                                 {"type": "object", "properties": {"id": {"type": "integer"}}}]},
            "limit": {"type": ["integer", "null"], "description": "Max hits"},
        },
        "required": ["pattern"],
        "additionalProperties": False}}}
BRAVE = {"type": "function", "function": {
    "name": "brave_search", "description": "Web search",
    "parameters": {"type": "object", "properties": {"query": {"type": "string",
                                                              "description": "Query"}},
                   "required": ["query"]}}}


def call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def tool(cid, name, content):
    return {"role": "tool", "tool_call_id": cid, "name": name, "content": content}


SYS = {"role": "system", "content": "You are a terse assistant."}

# (name, messages, tools, add_generation_prompt, extra kwargs, families or None for all)
CONVERSATIONS = [
    ("user_only", [{"role": "user", "content": "Hello! Who are you?"}], None, True, {}, None),
    ("user_only_no_generation_prompt", [{"role": "user", "content": "Hello! Who are you?"}],
     None, False, {}, None),
    ("system_multi_turn", [
        SYS,
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "  And of Italy?  \n"},
    ], None, True, {}, None),
    ("assistant_last_no_generation_prompt", [
        SYS,
        {"role": "user", "content": "Say hi in German."},
        {"role": "assistant", "content": "Hallo! Schön, dich zu sehen. 👋"},
    ], None, False, {}, None),
    ("tools_offered", [
        SYS, {"role": "user", "content": "Find TODOs in src, then tell me the weather in Oslo."},
    ], [WEATHER, TIME, SEARCH], True, {}, None),
    ("tools_offered_multi_turn", [
        SYS,
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello. How can I help?"},
        {"role": "user", "content": "What time is it?"},
    ], [WEATHER, TIME], True, {}, None),
    ("tools_offered_no_system", [
        {"role": "user", "content": "Weather in Oslo?"},
    ], [WEATHER], True, {}, None),
    ("tool_call_arguments_object", [
        {"role": "user", "content": "Weather in Paris for 2 days?"},
        {"role": "assistant", "content": "",
         "tool_calls": [call("call00001", "get_weather", {"city": "Paris", "days": 2})]},
        tool("call00001", "get_weather", "{\"temp\": 21.5, \"sky\": \"clear\"}"),
    ], [WEATHER, TIME], True, {}, None),
    ("tool_call_arguments_string", [
        {"role": "user", "content": "Weather in Paris for 2 days?"},
        {"role": "assistant", "content": "",
         "tool_calls": [call("call00001", "get_weather", "{\"city\": \"Paris\", \"days\": 2}")]},
        tool("call00001", "get_weather", "{\"temp\": 21.5, \"sky\": \"clear\"}"),
    ], [WEATHER, TIME], True, {}, None),
    ("tool_call_null_content", [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None,
         "tool_calls": [call("call00001", "get_weather", {"city": "Paris"})]},
        tool("call00001", "get_weather", "sunny"),
    ], [WEATHER], True, {}, None),
    ("parallel_tool_calls", [
        SYS,
        {"role": "user", "content": "Weather in Paris and Zürich, and the time?"},
        {"role": "assistant", "content": "Checking all three.",
         "tool_calls": [call("call00001", "get_weather", {"city": "Paris"}),
                        call("call00002", "get_weather", {"city": "Zürich", "unit": "c"}),
                        call("call00003", "get_time", {})]},
        tool("call00001", "get_weather", "{\"temp\": 21.5}"),
        tool("call00002", "get_weather", "{\"temp\": 18}"),
        tool("call00003", "get_time", "09:26"),
        {"role": "assistant", "content": "Paris 21.5 °C, Zürich 18 °C; it is 09:26."},
        {"role": "user", "content": "Thanks! And tomorrow?"},
    ], [WEATHER, TIME], True, {}, None),
    ("tool_call_nested_argument_values", [
        {"role": "user", "content": "Search for TODO or FIXME in src and tests."},
        {"role": "assistant", "content": "",
         "tool_calls": [call("call00001", "search_files",
                             {"pattern": "TODO|FIXME", "paths": ["src", "tests"],
                              "options": {"case": False, "max": 10.5, "weight": 1.0},
                              "limit": None, "target": 7, "dry": True})]},
        tool("call00001", "search_files", "src/a.cc:3: // TODO"),
    ], [SEARCH], True, {}, None),
    ("reasoning_content", [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "Simple arithmetic."},
        {"role": "user", "content": "3+3?"},
        {"role": "assistant", "content": "6",
         "reasoning_content": "\nThink about it\nstep by step.\n"},
    ], None, False, {}, None),
    ("reasoning_content_then_generation_prompt", [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "Simple arithmetic."},
        {"role": "user", "content": "3+3?"},
    ], None, True, {}, None),
    ("think_tags_in_content", [
        {"role": "user", "content": "First?"},
        {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nOne."},
        {"role": "user", "content": "Second?"},
        {"role": "assistant", "content": "<think>\n\nreasoning here\n\n</think>\n\nTwo."},
    ], None, False, {}, None),
    ("agent_loop_with_reasoning", [
        SYS,
        {"role": "user", "content": "What's the weather in Rome, and what time is it?"},
        {"role": "assistant", "content": "", "reasoning_content": "Need the weather first.",
         "tool_calls": [call("call00001", "get_weather", {"city": "Rome"})]},
        tool("call00001", "get_weather", "{\"temp\": 25}"),
        {"role": "assistant", "content": "", "reasoning_content": "Now the time.",
         "tool_calls": [call("call00002", "get_time", {})]},
        tool("call00002", "get_time", "11:00"),
    ], [WEATHER, TIME], True, {}, None),
    ("content_text_parts", [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Describe "},
                                     {"type": "text", "text": "this sentence."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "It is short."}]},
        {"role": "user", "content": [{"type": "text", "text": "Thanks."}]},
    ], None, True, {}, None),
    ("roles_not_alternating", [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
    ], None, True, {}, None),
    ("system_not_first", [
        {"role": "user", "content": "Hi"},
        {"role": "system", "content": "late system"},
        {"role": "user", "content": "Hi again"},
    ], None, True, {}, None),
    # --- thinking switches (Qwen3, Qwen3.5, GLM, DeepSeek-V3.1)
    ("enable_thinking_false", [SYS, {"role": "user", "content": "héllo 👋"}], None, True,
     {"enable_thinking": False}, {"thinking"}),
    ("enable_thinking_true", [SYS, {"role": "user", "content": "héllo 👋"}], None, True,
     {"enable_thinking": True}, {"thinking"}),
    ("enable_thinking_false_with_history", [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "Simple arithmetic."},
        {"role": "user", "content": "3+3? /nothink"},
    ], None, True, {"enable_thinking": False}, {"thinking"}),
    ("deepseek_thinking_true", [SYS, {"role": "user", "content": "Prove it."}], None, True,
     {"thinking": True}, {"deepseek"}),
    # --- gpt-oss (harmony): thinking field, reasoning_effort, builtin tools, developer role
    ("gpt_oss_thinking_field", [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "thinking": "Simple arithmetic."},
        {"role": "user", "content": "3+3?"},
        {"role": "assistant", "content": "6", "thinking": "Add three and three."},
    ], None, False, {}, {"gpt-oss"}),
    ("gpt_oss_tool_call_with_thinking", [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "thinking": "I should call get_weather.",
         "tool_calls": [call("call00001", "get_weather", {"city": "Paris"})]},
        tool("call00001", "get_weather", "{\"temp\": 21.5}"),
    ], [WEATHER, SEARCH], True, {}, {"gpt-oss"}),
    ("gpt_oss_reasoning_effort_high", [SYS, {"role": "user", "content": "Hard question."}], None,
     True, {"reasoning_effort": "high"}, {"gpt-oss"}),
    ("gpt_oss_builtin_tools_identity", [
        {"role": "developer", "content": "Answer in French."},
        {"role": "user", "content": "Look it up."},
    ], [TIME], True, {"reasoning_effort": "low", "builtin_tools": ["browser", "python"],
                      "model_identity": "You are Fak, a test model."}, {"gpt-oss"}),
    ("gpt_oss_channel_tags_rejected", [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<|channel|>final<|message|>Hello"},
    ], None, False, {}, {"gpt-oss"}),
    # --- `str + (x|tojson|safe)`: jinja2's Markup.__radd__ HTML-escapes the plain operand
    ("markup_concat_escapes_plain_operand", [
        {"role": "user", "content": "Compare a<b & c>d."},
        {"role": "assistant", "content": "",
         "tool_calls": [call("call00001", "cmp<&>", {"expr": "a<b & \"c\">d"})]},
        tool("call00001", "cmp<&>", "true"),
    ], None, True, {}, {"markup"}),
    # --- Llama 3.x: date_string, builtin tools / ipython, tools in system message
    ("llama_date_string", [SYS, {"role": "user", "content": "What day is it?"}], None, True,
     {"date_string": "14 Mar 2025"}, {"llama"}),
    ("llama_builtin_tools_ipython", [
        {"role": "user", "content": "Search the web for fak."},
        {"role": "assistant", "content": "",
         "tool_calls": [call("call00001", "brave_search", {"query": "fak inference"})]},
        {"role": "ipython", "content": "[{\"title\": \"fak\"}]"},
    ], [BRAVE], True, {"builtin_tools": ["brave_search", "wolfram_alpha", "code_interpreter"]},
     {"llama"}),
    ("llama_tools_in_system_message", [
        SYS,
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "",
         "tool_calls": [call("call00001", "get_weather", {"city": "Paris"})]},
        tool("call00001", "get_weather", {"temp": 21.5}),
    ], [WEATHER], True, {"tools_in_user_message": False}, {"llama"}),
]


def render(template, context):
    return ENV.from_string(template).render(**context)


def main():
    rows = []
    for tname, (fname, special, families) in TEMPLATES.items():
        with open(os.path.join(HERE, fname), encoding="utf-8") as f:
            template = f.read()
        for cname, messages, tools, agp, extra, only in CONVERSATIONS:
            if only is not None and not (only & families):
                continue
            context = {"messages": messages, "tools": tools, "documents": None,
                       "add_generation_prompt": agp, **special, **extra}
            row = {"template": tname, "case": cname, "context": context}
            try:
                Clock.now = NOW
                text = render(template, context)
                Clock.now = OTHER_NOW
                if render(template, context) != text:
                    row["strftime_now"] = NOW.isoformat()
                row["expected"] = text
            except Exception as e:  # noqa: BLE001 - any jinja2 failure is an expected error
                row["error"] = f"{type(e).__name__}: {e}"
            finally:
                Clock.now = NOW
            rows.append(row)
    out = {
        "generator": "tests/data/templates/gen_goldens.py (jinja2 " + jinja2.__version__ +
                     ", set up as transformers' apply_chat_template)",
        "strftime_now": NOW.isoformat(),
        "templates": {name: fname for name, (fname, _, _) in TEMPLATES.items()},
        "cases": rows,
    }
    with open(os.path.join(HERE, "goldens.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum("error" in r for r in rows)
    print(f"{len(rows)} rows ({n_err} errors) -> goldens.json")


if __name__ == "__main__":
    main()
