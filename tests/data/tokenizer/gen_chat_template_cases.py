#!/usr/bin/env python3
"""Regenerates qwen-chat-template-cases.json and jinja-cases.json: expected renders from jinja2 configured exactly as
transformers' apply_chat_template configures it (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, transformers' tojson / raise_exception). Run from the repo root:
    python3 tests/data/tokenizer/gen_chat_template_cases.py
Needs only `jinja2` (no transformers); the Qwen template is read from the fixture config."""
import json
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = "tests/data/tokenizer"


def make_env():
    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


ENV = make_env()


def render(template, messages, tools=None, add_generation_prompt=False, **extra):
    return ENV.from_string(template).render(messages=messages, tools=tools, documents=None,
                                            add_generation_prompt=add_generation_prompt, **extra)


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city — in °C",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                      "days": {"type": "integer", "default": 1}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "Current time",
                                         "parameters": {"type": "object", "properties": {}}}}

CONVERSATIONS = [
    {"name": "tool_call_dict_args", "tools": [WEATHER, TIME], "add_generation_prompt": True,
     "messages": [
         {"role": "system", "content": "You are helpful."},
         {"role": "user", "content": "Weather in Paris and Zürich?"},
         {"role": "assistant", "content": "",
          "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                           "arguments": {"city": "Paris"}}},
                         {"type": "function", "function": {"name": "get_weather",
                                                           "arguments": {"city": "Zürich",
                                                                         "days": 2}}}]},
         {"role": "tool", "tool_call_id": "a", "content": "{\"temp\": 21.5}"},
         {"role": "tool", "tool_call_id": "b", "content": "{\"temp\": 18}"},
     ]},
    {"name": "tool_call_string_args_and_content", "tools": [WEATHER],
     "add_generation_prompt": False,
     "messages": [
         {"role": "user", "content": "Weather?"},
         {"role": "assistant", "content": "Let me check.",
          "tool_calls": [{"id": "x", "type": "function",
                          "function": {"name": "get_weather",
                                       "arguments": "{\"city\": \"Oslo\"}"}}]},
         {"role": "tool", "content": "cold"},
         {"role": "assistant", "content": "It is cold in Oslo."},
     ]},
    {"name": "reasoning_after_last_query", "tools": None, "add_generation_prompt": True,
     "messages": [
         {"role": "user", "content": "First?"},
         {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nOne."},
         {"role": "user", "content": "Second?"},
         {"role": "assistant", "content": "Two.", "reasoning_content": "think hard"},
         {"role": "user", "content": "<tool_response>\nx\n</tool_response>"},
     ]},
    {"name": "thinking_in_content_last_turn", "tools": None, "add_generation_prompt": False,
     "messages": [
         {"role": "user", "content": "Q"},
         {"role": "assistant", "content": "<think>\n\nreasoning here\n\n</think>\n\nAnswer"},
     ]},
    {"name": "enable_thinking_false", "tools": None, "add_generation_prompt": True,
     "extra": {"enable_thinking": False},
     "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "héllo 👋"}]},
    {"name": "system_with_tools", "tools": [TIME], "add_generation_prompt": True,
     "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "t?"},
                  {"role": "system", "content": "late system"}]},
]


# (name, template, variables): small templates exercising one Jinja feature each. "error": true
# when jinja2 raises.
FEATURES = [
    ("loop_vars", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
     "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
     {"xs": ["a", "b", "c"]}),
    ("loop_else", "{% for x in xs %}{{ x }}{% else %}empty{% endfor %}", {"xs": []}),
    ("loop_filter", "{% for x in xs if x > 1 %}{{ x }}{{ loop.last }}{% endfor %}",
     {"xs": [1, 2, 3]}),
    ("loop_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
     {"d": {"b": 1, "a": 2}}),
    ("loop_dict_keys", "{% for k in d %}{{ k }}{% endfor %}", {"d": {"z": 1, "y": 2}}),
    ("loop_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}"
     "{% if x > 4 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("loop_prev_next_cycle", "{% for x in xs %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}"
     "{{ loop.cycle('o', 'e') }} {% endfor %}", {"xs": [1, 2, 3]}),
    ("loop_scope", "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 9 %}{{ x }}{% endfor %}"
     "{{ x }}", {}),
    ("nested_loops", "{% for a in [1,2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} "
     "{% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("namespace", "{% set ns = namespace(n=0, s='') %}{% for x in [1,2,3] %}{% set ns.n = ns.n + x %}"
     "{% set ns.s = ns.s ~ x %}{% endfor %}{{ ns.n }} {{ ns.s }}", {}),
    ("if_elif_else", "{% for x in [1,2,3,4] %}{% if x == 1 %}one{% elif x == 2 %}two"
     "{% elif x == 3 %}three{% else %}many{% endif %} {% endfor %}", {}),
    ("whitespace_control", "a  {%- if true -%}  b  {%- endif -%}  c\n  {{- 'd' -}}  \n e", {}),
    ("whitespace_plus", "x\n    {%+ if true %}y{% endif +%}\nz", {}),
    ("trim_lstrip", "<ul>\n  {% for x in xs %}\n    <li>{{ x }}</li>\n  {% endfor %}\n</ul>\n",
     {"xs": [1, 2]}),
    ("comment_strip", "a\n  {# note #}\nb {#- c -#} d", {}),
    ("raw_block", "{% raw %}{{ not rendered }}{% endraw %}!", {}),
    ("trailing_newline", "x\n", {}),
    ("crlf", "a\r\n{% if true %}\r\nb{% endif %}\r\n", {}),
    ("filters_basic", "{{ '  Hi  '|trim }}|{{ 'ab'|upper }}|{{ 'AB'|lower }}|{{ xs|length }}|"
     "{{ xs|first }}|{{ xs|last }}|{{ xs|join(', ') }}|{{ 'hello world'|title }}|"
     "{{ 'hELLO'|capitalize }}|{{ 3|string ~ 'x' }}|{{ '42'|int + 1 }}|{{ 'x'|int }}|"
     "{{ 'a-b-a'|replace('a', 'c') }}|{{ xs|reverse|join }}|{{ xs|list }}|{{ 'é'|length }}",
     {"xs": [3, 1, 2]}),
    ("filter_default", "{{ missing|default('d') }}|{{ ''|default('e') }}|{{ ''|default('f', true) }}"
     "|{{ none|d('g') }}", {}),
    ("filter_items", "{% for k, v in d|items %}{{ k }}:{{ v }} {% endfor %}",
     {"d": {"one": 1, "two": [2]}}),
    ("filter_selectattr", "{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='content')"
     "|join(',') }}|{{ ms|rejectattr('role', 'eq', 'user')|list|length }}|"
     "{{ ms|selectattr('ok')|map(attribute='role')|list }}|{{ [1,2,3,4]|select('odd')|list }}|"
     "{{ ['a','B']|map('upper')|join }}",
     {"ms": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b", "ok": True},
             {"role": "user", "content": "c"}]}),
    ("filter_tojson", "{{ v|tojson }}\n{{ v|tojson(indent=2) }}\n{{ v|tojson(sort_keys=true) }}"
     "\n{{ 'é\"\\n<>&'|tojson }}",
     {"v": {"b": [1, 2.5, None, True, "x"], "a": {}, "c": [], "f": 1e20, "g": 0.1}}),
    ("filter_misc", "{{ [3,1,2]|sort|join }}{{ ['b','A','c']|sort|join }}{{ [1,1,2]|unique|list }}"
     "{{ [1,2,3]|sum }}{{ [1,5,3]|max }}{{ -3|abs }}{{ 2.5|round }}{{ 3.14159|round(2) }}"
     "{{ 'a\nb\n\nc'|indent(2) }}|{{ 'x %s %d'|format('y', 3) }}|{{ '<a>'|e }}", {}),
    ("tests", "{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ n is none }}"
     "{{ x is string }}{{ d is mapping }}{{ l is iterable }}{{ l is sequence }}{{ 1 is number }}"
     "{{ b is true }}{{ b is false }}{{ 1 is true }}{{ 3 is odd }}{{ 4 is even }}"
     "{{ 6 is divisibleby 3 }}{{ x is not none }}{{ d is iterable }}{{ 1.5 is float }}"
     "{{ 2 is integer }}{{ x is in ['s'] }}{{ d is sequence }}",
     {"x": "s", "n": None, "d": {"a": 1}, "l": [1], "b": True}),
    ("operators", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} "
     "{{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 'a' ~ 1 ~ none }} {{ 'ab' * 3 }} "
     "{{ [1] + [2] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 4 }} {{ 'b' in 'abc' }} {{ 4 not in [1] }} "
     "{{ not 0 }} {{ 1 and 'x' }} {{ 0 or 'y' }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' != 'b' }} "
     "{{ 1.5 + 1 }} {{ 10 / 4 }} {{ 1e3 }} {{ 0.1 + 0.2 }} {{ 2 ** -1 }}", {}),
    ("ternary", "{{ 'y' if x else 'n' }}{{ 'y' if not x else 'n' }}{{ 'z' if false }}",
     {"x": 1}),
    ("subscripts_slices", "{{ s[1] }}{{ s[-1] }}{{ s[1:3] }}{{ s[::-1] }}{{ s[::2] }}{{ l[1:] }}"
     "{{ l[:-1] }}{{ l[-2:] }}{{ l[5:] }}{{ d['k'] }}{{ d.k }}{{ l[0] }}{{ m[0].role }}"
     "{{ 'héllo'[1:3] }}{{ l[::-1][0] }}",
     {"s": "abcdef", "l": [1, 2, 3], "d": {"k": "v"}, "m": [{"role": "r"}]}),
    ("string_methods", "{{ s.startswith('ab') }}{{ s.endswith(('x', 'ef')) }}{{ '  p '.strip() }}|"
     "{{ 'xxpxx'.strip('x') }}|{{ '\n\nq'.lstrip('\n') }}|{{ 'r  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}"
     "{{ ' a  b '.split() }}{{ 'a</think>b</think>c'.split('</think>')[-1] }}"
     "{{ s.replace('c', 'C') }}{{ s.upper() }}{{ 'AB'.lower() }}{{ '{} and {}'.format(1, 'x') }}"
     "{{ 'a b'.title() }}{{ s.find('cd') }}{{ '-'.join(['a', 'b']) }}{{ 'a,b,c'.rsplit(',', 1) }}",
     {"s": "abcdef"}),
    ("dict_methods", "{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 'dflt') }}{{ d.keys()|list }}"
     "{{ d.values()|list }}{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}{{ d }}",
     {"d": {"a": 1, "b": "two"}}),
    ("printing", "{{ none }}|{{ true }}|{{ 1.0 }}|{{ [1, 'a', none, 1.5, {'k': \"it's\"}] }}|"
     "{{ undefined_var }}|{{ 1e16 }}|{{ 123456789.0 }}|{{ 1e-5 }}", {}),
    ("macros", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
     "{{ greet('A') }} {{ greet('B', '?') }} {{ greet(name='C', punct='.') }} {{ greet() }}", {}),
    ("macro_call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}"
     "{% call wrap('b') %}inner {{ x }}{% endcall %}", {"x": 1}),
    ("macro_sees_globals", "{% macro m() %}{{ g }}{% endmacro %}{% set g = 'top' %}{{ m() }}", {}),
    ("macro_recursion", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
     "{{ f(4) }}", {}),
    ("set_block", "{% set x %}a{{ 1 + 1 }}b{% endset %}[{{ x }}]{% set y | upper %}lo{% endset %}"
     "{{ y }}", {}),
    ("filter_block", "{% filter upper %}abc {{ 'd' }}{% endfilter %}", {}),
    ("set_multiple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (1, 2) %}{{ t|length }}", {}),
    ("dict_literal", "{% set d = {'a': 1, 'b': [1, 2]} %}{{ d.a }}{{ d['b'][1] }}{{ d|length }}"
     "{{ d|tojson }}{{ dict(x=1)|tojson }}", {}),
    ("range", "{{ range(3)|list }}{{ range(1, 7, 2)|list }}{{ range(3, 0, -1)|list }}", {}),
    ("string_escapes", "{{ 'a\\tb\\nc\\\\d\\'e' }}|{{ \"q\\\"r\" }}|{{ '\\u00e9\\x41' }}", {}),
    ("string_concat_literals", "{{ 'a' 'b' }}", {}),
    ("in_dict", "{{ 'a' in d }}{{ 'z' in d }}{{ 'x' in undefined_thing }}", {"d": {"a": 1}}),
    ("raise_exception", "{% if x %}{{ raise_exception('bad role: ' ~ x) }}{% endif %}", {"x": "q"}),
    ("undefined_attr_error", "{{ missing.attr }}", {}),
    ("undefined_add_error", "{{ missing + 'x' }}", {}),
    ("undefined_attr_of_defined", "[{{ d.nope }}]{{ d.nope is defined }}", {"d": {}}),
    ("none_attr", "[{{ n.x }}]", {"n": None}),
    ("int_string_add_error", "{{ 1 + 'a' }}", {}),
    ("json_unicode", "{{ s|tojson }}", {"s": "日本\u0001\t"}),
]


def main():
    feature_cases = []
    for name, template, variables in FEATURES:
        case = {"name": name, "template": template, "vars": variables}
        try:
            case["text"] = ENV.from_string(template).render(**variables)
        except Exception as e:  # noqa: BLE001 - any jinja2 failure is an expected error
            case["error"] = f"{type(e).__name__}: {e}"
        feature_cases.append(case)
    with open(f"{HERE}/jinja-cases.json", "w") as f:
        json.dump({"generator": "gen_chat_template_cases.py", "cases": feature_cases}, f,
                  ensure_ascii=False, indent=1)
        f.write("\n")

    qwen = json.load(open(f"{HERE}/qwen/tokenizer_config.json"))["chat_template"]
    cases = []
    for c in CONVERSATIONS:
        text = render(qwen, c["messages"], c["tools"], c["add_generation_prompt"],
                      **c.get("extra", {}))
        cases.append({**c, "text": text})
    with open(f"{HERE}/qwen-chat-template-cases.json", "w") as f:
        json.dump({"generator": "gen_chat_template_cases.py (jinja2 as transformers sets it up)",
                   "conversations": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
