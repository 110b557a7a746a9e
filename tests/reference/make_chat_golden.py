#!/usr/bin/env python3
"""Writes the golden outputs of the chat-template tests with Python jinja2.

Each template in tests/data/chat_templates/*.jinja is rendered over a table of conversations
(system + user, multi-turn, with and without the generation prompt, tools, and conversations
the template rejects) in the environment Hugging Face's apply_chat_template uses:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols
extension and a {% generation %} tag, a `tojson` that neither escapes HTML nor non-ASCII, and
the globals raise_exception and strftime_now. A list of small snippets (FEATURES below)
pins the Jinja features one at a time, including the errors jinja2 reports.

Output: tests/data/chat_templates/conversations.json (the table), <name>.golden.json (per
template: each conversation with and without the generation prompt), features.golden.json.
Run: .venv/bin/python tests/reference/make_chat_golden.py
"""
import datetime
import json
import pathlib

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "chat_templates"


class AssistantTracker(jinja2.ext.Extension):
    """Hugging Face's {% generation %} tag: renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_render", [])
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


# ----------------------------------------------------------------------------- templates
# name -> special tokens and extra variables. Sources: tests/data/chat_templates/SOURCES.md.
TEMPLATES = {
    "smollm2": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"},
    "chatml": {"bos_token": "", "eos_token": "<|im_end|>"},
    "llama2": {"bos_token": "<s>", "eos_token": "</s>"},
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    # date_string pins the date the template would otherwise take from strftime_now.
    "llama3.1_tools": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                       "extra_variables": {"date_string": "26 Jul 2024"}},
    "mistral_instruct": {"bos_token": "<s>", "eos_token": "</s>"},
    "mistral_tools": {"bos_token": "<s>", "eos_token": "</s>"},
    "qwen2.5": {"bos_token": "", "eos_token": "<|im_end|>"},
    "hermes_tools": {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"},
    "gemma": {"bos_token": "<bos>", "eos_token": "<eos>"},
    "phi3": {"bos_token": "<s>", "eos_token": "<|endoftext|>"},
    "deepseek_r1_distill": {"bos_token": "<｜begin▁of▁sentence｜>",
                            "eos_token": "<｜end▁of▁sentence｜>"},
    "deepseek_v31": {"bos_token": "<｜begin▁of▁sentence｜>",
                     "eos_token": "<｜end▁of▁sentence｜>"},
    "phi4_mini": {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
    "kimi_k2": {"bos_token": "[BOS]", "eos_token": "[EOS]"},
    "kimi_k2_thinking": {"bos_token": "[BOS]", "eos_token": "[EOS]"},
    "glm46": {"bos_token": "", "eos_token": "<|endoftext|>"},
    "nemotron_nano_v2": {"bos_token": "<SPECIAL_1>", "eos_token": "<SPECIAL_12>"},
    # gpt-oss writes strftime_now("%Y-%m-%d") into every system message: "dated" goldens hold
    # TODAY_MARK where jinja2 rendered today's date, and the test puts it where we render it.
    "gpt_oss": {"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "dated": True},
}
TODAY_MARK = "<today>"

# ----------------------------------------------------------------------------- conversations
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "Hello! How are you?"}
ASSISTANT = {"role": "assistant", "content": "I am fine, thank you. How can I help?"}
USER2 = {"role": "user", "content": "What is 2 + 2?"}

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "location": {"type": "string", "description": "The city, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                     "description": "The temperature unit"}},
            "required": ["location"]}}},
    {"type": "function", "function": {
        "name": "get_time",
        "description": "Current time in a time zone (\"IANA\" name) — e.g. Europe/Paris.",
        "parameters": {"type": "object", "properties": {
            "zone": {"type": "string", "description": "Time zone"},
            "precise": {"type": "boolean", "description": "With seconds"},
            "offsets": {"type": "array", "items": {"type": "integer"},
                        "description": "Offsets in hours"}},
            "required": ["zone"]}}},
]

TOOL_CALL = {"id": "call_1", "type": "function",
             "function": {"name": "get_weather",
                          "arguments": {"location": "Paris", "unit": "celsius"}}}
TOOL_CALL_2 = {"id": "call_2", "type": "function",
               "function": {"name": "get_time", "arguments": {"zone": "Europe/Paris"}}}
WEATHER_QUESTION = {"role": "user", "content": "What's the weather in Paris?"}
TOOL_RESULT = {"role": "tool", "name": "get_weather", "tool_call_id": "call_1",
               "content": "{\"temperature\": 21.5, \"condition\": \"sunny\"}"}

# name -> (messages, tools, extra variables); each renders with and without the prompt.
CONVERSATIONS = {
    "user": ([USER], None, {}),
    "system_user": ([SYSTEM, USER], None, {}),
    "multi_turn": ([SYSTEM, USER, ASSISTANT, USER2], None, {}),
    "multi_turn_no_system": ([USER, ASSISTANT, USER2], None, {}),
    "ends_with_assistant": ([SYSTEM, USER, ASSISTANT], None, {}),
    "whitespace_and_unicode": ([
        {"role": "system", "content": "  Be terse.\n"},
        {"role": "user", "content": "  Ünïcödé ✓ 日本語 \"quotes\", 'apostrophes' & <tags>\n\n"},
        {"role": "assistant", "content": "\tOK \\n 😀 \n"},
        {"role": "user", "content": "Line one\r\nline two\n"}], None, {}),
    "think_tags": ([USER2, {"role": "assistant",
                            "content": "<think>2 and 2 make 4.</think>The answer is 4."},
                    {"role": "user", "content": "And 3 + 3?"}], None, {}),
    "thinking_off": ([SYSTEM, USER, {"role": "assistant",
                                     "content": "<think>\nShort.\n</think>\n\nFine."},
                      {"role": "user", "content": "Explain /no_think"}], None,
                     {"enable_thinking": False}),
    "thinking_on": ([USER, {"role": "assistant", "content": "Fine.",
                            "reasoning_content": "The user greets me."}, USER2], None,
                    {"enable_thinking": True, "thinking": True}),
    "not_alternating": ([USER, USER2], None, {}),
    "assistant_first": ([ASSISTANT, USER], None, {}),
    "tools_offered": ([SYSTEM, WEATHER_QUESTION], TOOLS, {}),
    "tools_no_system": ([WEATHER_QUESTION], TOOLS, {}),
    "tool_call_round_trip": ([WEATHER_QUESTION,
                              {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
                              TOOL_RESULT], TOOLS, {}),
    "tool_call_with_text": ([SYSTEM, WEATHER_QUESTION,
                             {"role": "assistant", "content": "Let me check.",
                              "tool_calls": [TOOL_CALL]},
                             TOOL_RESULT,
                             {"role": "assistant", "content": "It is sunny, 21.5 °C."},
                             {"role": "user", "content": "Thanks!"}], TOOLS, {}),
    "parallel_tool_calls": ([WEATHER_QUESTION,
                             {"role": "assistant", "content": "",
                              "tool_calls": [TOOL_CALL, TOOL_CALL_2]},
                             TOOL_RESULT,
                             {"role": "tool", "name": "get_time", "tool_call_id": "call_2",
                              "content": "14:05"}], TOOLS, {}),
    "tool_result_without_name": ([WEATHER_QUESTION,
                                  {"role": "assistant", "content": None,
                                   "tool_calls": [TOOL_CALL]},
                                  {"role": "tool", "content": "sunny"}], TOOLS, {}),
    "tool_call_string_arguments": ([WEATHER_QUESTION,
                                    {"role": "assistant", "content": None, "tool_calls": [
                                        {"type": "function", "function": {
                                            "name": "get_weather",
                                            "arguments": "{\"location\": \"Paris\"}"}}]},
                                    TOOL_RESULT], None, {}),
    "tools_in_system_prompt": ([SYSTEM, WEATHER_QUESTION], TOOLS,
                               {"tools_in_user_message": False}),
    "content_parts": ([{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                       {"role": "user", "content": [{"type": "text", "text": " Hi "},
                                                    {"type": "image"},
                                                    {"type": "text", "text": "there"}]}],
                      TOOLS, {}),
}


# ----------------------------------------------------------------------------- features
# (name, template, variables): one Jinja feature each, rendered alone. Python tuples print as
# "(1, 2)" but ours are lists ("[1, 2]"): the snippets use tuples without printing them.
MSGS = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"}]
FEATURES = [
    # whitespace control: trim_blocks, lstrip_blocks, -, +
    ("ws_trim_blocks", "{% if true %}\nyes\n{% endif %}\nafter", {}),
    ("ws_lstrip_blocks", "line\n    {% if true %}\n  kept\n    {% endif %}\nend", {}),
    ("ws_minus", "a   {%- if true -%}   b   {%- endif -%}   c", {}),
    ("ws_minus_var", "a \n {{- 'b' -}} \n c", {}),
    ("ws_plus", "x\n  {%+ if true +%}\ny{% endif %}", {}),
    ("ws_comment", "a\n  {# note #}\nb {#- tight -#} c", {}),
    ("ws_var_not_lstripped", "  {{ 'v' }}\n  {% if true %}t{% endif %}", {}),
    ("ws_trailing_newline", "text\n", {}),
    ("raw_block", "{% raw %}{{ not rendered }} {% if %}{% endraw %}|\n  {% raw -%}  \n x {%- endraw %}\n"
     "|{%- raw %} y \n  {% endraw +%}\nz", {}),
    ("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n", {}),
    # for loops
    ("loop_vars", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
     "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
     {"xs": ["a", "b", "c"]}),
    ("loop_prev_next", "{% for x in xs %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}|"
     "{% endfor %}", {"xs": [1, 2, 3]}),
    ("loop_cycle", "{% for i in range(5) %}{{ loop.cycle('odd', 'even') }} {% endfor %}", {}),
    ("loop_else", "{% for x in xs %}{{ x }}{% else %}empty{% endfor %}", {"xs": []}),
    ("loop_filter", "{% for m in messages if m.role != 'system' %}{{ loop.index }}:{{ m.role }} "
     "{% endfor %}", {"messages": MSGS}),
    ("loop_unpack_items", "{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}",
     {"d": {"b": 1, "a": [1, 2], "c": None}}),
    ("loop_dict_keys", "{% for k in d %}{{ k }}{% endfor %}", {"d": {"z": 1, "y": 2}}),
    ("loop_string", "{% for c in 'héllo' %}[{{ c }}]{% endfor %}", {}),
    ("loop_break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}"
     "{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("loop_scope", "{% set x = 'outer' %}{% for i in [1, 2] %}{% set x = 'inner' ~ i %}{{ x }} "
     "{% endfor %}{{ x }}", {}),
    ("loop_nested", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}"
     "{{ loop.index }}{% endfor %}/{{ loop.index }} {% endfor %}", {}),
    ("loop_undefined", "{% for x in missing %}{{ x }}{% else %}none{% endfor %}", {}),
    ("range_forms", "{{ range(3) | list }} {{ range(1, 7, 2) | list }} "
     "{{ range(5, 0, -2) | list }}",
     {}),
    # if / elif / else, conditional expressions
    ("if_elif_else", "{% for n in [0, 1, 2, 3] %}{% if n == 0 %}zero{% elif n == 1 %}one"
     "{% elif n is even %}even{% else %}odd{% endif %},{% endfor %}", {}),
    ("cond_expr", "{{ 'a' if x else 'b' }}{{ 'c' if not x }}|{{ 'd' if y else 'e' }}",
     {"x": False, "y": [0]}),
    # set, namespace, set block
    ("set_tuple", "{% set a, b = 1, 'two' %}{{ a }}{{ b }}{% set t = (1, 2) %}{{ t[1] }}"
     "{{ t | length }}",
     {}),
    ("namespace", "{% set ns = namespace(count=0, seen=false) %}{% for m in messages %}"
     "{% set ns.count = ns.count + 1 %}{% if m.role == 'user' %}{% set ns.seen = true %}"
     "{% endif %}{% endfor %}{{ ns.count }} {{ ns.seen }}", {"messages": MSGS}),
    ("set_block", "{% set greeting %}Hello {{ name }}!{% endset %}[{{ greeting | upper }}]",
     {"name": "Ann"}),
    ("set_block_filter", "{% set s | trim %}   padded   {% endset %}[{{ s }}]", {}),
    ("filter_block", "{% filter upper %}shout {{ 'this' }}{% endfilter %}", {}),
    # macros
    ("macro_defaults", "{% macro tag(name, value='x', sep=': ') %}<{{ name }}{{ sep }}{{ value }}>"
     "{% endmacro %}{{ tag('a') }}{{ tag('b', 2) }}{{ tag('c', sep='=', value=[1]) }}", {}),
    ("macro_recursive", "{% macro count(n) %}{{ n }}{% if n > 0 %},{{ count(n - 1) }}{% endif %}"
     "{% endmacro %}{{ count(4) }}", {}),
    ("macro_sees_globals", "{% set g = 'global' %}{% macro m() %}{{ g }}-{{ bos_token }}"
     "{% endmacro %}{{ m() }}", {"bos_token": "<s>"}),
    # expressions and operators
    ("arithmetic", "{{ 7 + 3 }} {{ 7 - 10 }} {{ 7 * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} "
     "{{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1.5 + 1 }} {{ 10 / 5 }}", {}),
    ("float_format", "{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1.0e-5 }} {{ 123456789.125 }} {{ 2.5e15 }} "
     "{{ -0.0 }} {{ 3.0 }} {{ x }}", {"x": 1e22}),
    ("string_concat", "{{ 'a' + 'b' }} {{ 'n' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] + [2] }}",
     {}),
    ("comparisons", "{{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] == [1, 2] }} "
     "{{ {'a': 1} == {'a': 1} }} {{ 1 != '1' }} {{ none == none }} {{ 2 >= 3 }}", {}),
    ("in_operator", "{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} "
     "{{ 'x' not in 'abc' }} {{ 'tool_calls' in m }}", {"m": {"role": "user"}}),
    ("logic", "{{ true and 'yes' }} {{ false or 'fallback' }} {{ not none }} {{ 0 or [] or 'z' }} "
     "{{ 1 and 0 }}", {}),
    ("literals", "{{ [1, 'a', none, true, 1.5] }} {{ {'k': 'v', 'n': [1]} }} {{ (1,)[0] }} "
     "{{ 'it\\'s' }} {{ \"say \\\"hi\\\"\" }}", {}),
    ("string_escapes", "{{ 'tab\\there' }}|{{ 'nl\\n' }}|{{ 'u\\u00e9' }}|{{ 'x\\x41' }}|"
     "{{ 'keep\\d' }}", {}),
    ("print_values", "{{ none }} {{ true }} {{ 42 }} {{ -3 }} {{ d }} {{ l }} {{ s }}",
     {"d": {"a": "it's", "b": "\"q\"", "c": {"x": None}}, "l": ["a\nb", 1.0, False],
      "s": "plain"}),
    # attribute and item access, slicing
    ("access", "{{ m.role }} {{ m['content'] }} {{ ms[1].role }} {{ ms[-1]['content'] }} "
     "{{ ms.0.role }} {{ m.missing is defined }} {{ m['nope'] is undefined }}",
     {"m": MSGS[1], "ms": MSGS}),
    ("slicing", "{{ l[1:] }} {{ l[:-1] }} {{ l[::2] }} {{ l[::-1] }} {{ s[1:4] }} {{ s[-3:] }} "
     "{{ s[::-1] }} {{ l[5:] }}", {"l": [0, 1, 2, 3, 4], "s": "héllo wörld"}),
    ("dict_methods", "{{ d.keys() | list }} {{ d.values() | list }} "
     "{{ d.items() | map('join', '=') | list }} "
     "{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }}", {"d": {"a": 1, "b": 2}}),
    # string methods
    ("str_strip", "[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}]"
     "[{{ 'xxhixx'.strip('x') }}]",
     {"s": " \t padded \n "}),
    ("str_split", "{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a-b-c'.split('-', 1) }} "
     "{{ 'x</think>y</think>z'.split('</think>')[-1] }}", {}),
    ("str_affixes", "{{ s.startswith('Hel') }} {{ s.endswith('!') }} "
     "{{ s.startswith(('x', 'H')) }}",
     {"s": "Hello!"}),
    ("str_replace_case", "{{ s.replace('l', 'L') }} {{ s.replace('l', '', 1) }} {{ s.upper() }} "
     "{{ s.lower() }} {{ s.title() }} {{ s.capitalize() }}", {"s": "hello wOrld"}),
    ("str_find_join", "{{ s.find('o') }} {{ s.rfind('o') }} {{ s.find('z') }} {{ s.count('o') }} "
     "{{ '-'.join(['a', 'b']) }} {{ s.splitlines() }}", {"s": "foo\nboo"}),
    # filters
    ("filter_trim_length", "[{{ s | trim }}] {{ s | length }} {{ l | length }} {{ d | count }} "
     "[{{ 'xxyx' | trim('x') }}]", {"s": "  héllo  ", "l": [1, 2], "d": {"a": 1}}),
    ("filter_default", "{{ missing | default('d') }} {{ none | default('d') }} "
     "{{ '' | default('d', true) }} {{ x | d('no') }}", {"x": 0}),
    ("filter_join_list", "{{ l | join(', ') }} {{ l | join }} "
     "{{ ms | join('|', attribute='role') }} "
     "{{ 'abc' | list }}", {"l": [1, "b", None], "ms": MSGS}),
    ("filter_case", "{{ 'Mixed Case' | upper }} {{ 'Mixed Case' | lower }} "
     "{{ 'hello world-wide (x)' | title }} {{ 'hELLO' | capitalize }}", {}),
    ("filter_first_last", "{{ l | first }} {{ l | last }} {{ 'abc' | first }} {{ [] | first }}",
     {"l": [3, 4, 5]}),
    ("filter_numbers", "{{ '42' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ '2.5' | float }} "
     "{{ -4 | abs }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ 2.1 | round(0, 'ceil') }}", {}),
    ("filter_string", "{{ l | string }} {{ 1.0 | string }} {{ none | string }} "
     "{{ d | string }}", {"l": [1, "a", None, True], "d": {"k": "v'q"}}),
    ("filter_tojson", "{{ v | tojson }}|{{ v | tojson(indent=2) }}|{{ s | tojson }}",
     {"v": {"b": [1, 2.5, None, True], "a": "x<y>&'z'", "u": "日本 é", "e": {}, "l": []},
      "s": "ctl\u0001\t\"\\"}),
    ("filter_tojson_options", "{{ v | tojson(sort_keys=true) }}|"
     "{{ v | tojson(separators=(',', ':')) }}"
     "|{{ v | tojson(ensure_ascii=true) }}|{{ v | tojson(indent=0) }}",
     {"v": {"z": 1, "a": ["é", 1e-07, 100000000000000000000.0]}}),
    ("filter_items_dictsort", "{{ d | items | map('last') | list }} "
     "{% for k, v in d | dictsort %}{{ k }}{{ v }}{% endfor %} "
     "{{ d | dictsort(by='value', reverse=true) | map('first') | join }}",
     {"d": {"b": 2, "a": 3, "C": 1}}),
    ("filter_select", "{{ ms | selectattr('role', 'equalto', 'user') | list }} "
     "{{ ms | rejectattr('role', 'eq', 'user') | map(attribute='role') | list }} "
     "{{ [0, 1, 2, 3] | select('odd') | list }} {{ [0, 1, '', 'a'] | select | list }} "
     "{{ [1, 2, 3] | reject('gt', 1) | list }}", {"ms": MSGS}),
    ("filter_map", "{{ ms | map(attribute='content') | map('upper') | join(',') }} "
     "{{ ms | map(attribute='nope', default='-') | list }} {{ [' a', 'b '] | map('trim') | list }}",
     {"ms": MSGS}),
    ("filter_sort_unique", "{{ l | sort }} {{ l | sort(reverse=true) }} {{ l | unique | list }} "
     "{{ ms | sort(attribute='role') | map(attribute='role') | list }} {{ w | sort }} "
     "{{ w | sort(case_sensitive=true) }}",
     {"l": [3, 1, 2, 3, 1], "ms": MSGS, "w": ["b", "A", "a", "B"]}),
    ("filter_aggregate", "{{ [1, 2, 3] | sum }} {{ [1, 5, 3] | max }} {{ [4, 2, 8] | min }} "
     "{{ ms | map(attribute='role') | reverse | list }} {{ 'abc' | reverse }}", {"ms": MSGS}),
    ("filter_indent", "[{{ s | indent }}][{{ s | indent(2, true) }}][{{ s | indent(first=true, "
     "blank=true) }}]", {"s": "a\n\nb\nc"}),
    ("filter_replace_escape", "{{ 'aaa' | replace('a', 'b', 2) }} {{ '<a href=\"x\">&</a>' | e }} "
     "{{ 'one two  three' | wordcount }}", {}),
    # tests
    ("tests_types", "{{ none is none }} {{ 1 is number }} {{ true is number }} {{ 1 is integer }} "
     "{{ 1.0 is float }} {{ 's' is string }} {{ d is mapping }} {{ l is sequence }} "
     "{{ 's' is iterable }} {{ 1 is iterable }} {{ true is boolean }} {{ range is callable }} "
     "{{ x is defined }} {{ x is undefined }} {{ none is not none }}",
     {"d": {}, "l": []}),
    ("tests_values", "{{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} "
     "{{ 'a' is in 'abc' }} "
     "{{ 'ab' is lower }} {{ 'AB' is upper }} {{ 1 is eq 1 }} {{ 2 is gt 1 }} "
     "{{ 'x' is equalto 'x' }} {{ false is sameas false }} {{ true is true }} {{ 0 is false }}",
     {}),
    # globals
    ("raise_exception", "{% if messages[0].role != 'user' %}{{ raise_exception('First message "
     "must be from the user, got ' + messages[0].role) }}{% endif %}ok", {"messages": MSGS}),
    ("dict_global", "{{ dict(a=1, b='x') }} {{ namespace(a=1).a }}", {}),
    ("generation_tag", "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}"
     "{{ m.content }}{% endgeneration %}{% else %}{{ m.role }}{% endif %}|{% endfor %}",
     {"messages": MSGS}),
    ("undefined_prints_empty", "[{{ missing }}][{{ m.missing }}][{{ missing | length }}]",
     {"m": {}}),
    # scoping and combinations real templates rely on
    ("scope_set_in_iteration", "{% for i in [1, 2, 3] %}{% if i == 1 %}{% set x = 'set' %}"
     "{% endif %}[{{ x }}]{% endfor %}", {}),
    ("scope_loop_var_after_loop", "{% for i in [1, 2] %}{% endfor %}{{ i is defined }}", {}),
    ("scope_macro_sees_later_global", "{% macro m() %}{{ later }}{% endmacro %}"
     "{% set later = 'L' %}{{ m() }}", {}),
    ("scope_macro_no_caller_loop", "{% macro m() %}{{ loop is defined }}{% endmacro %}"
     "{% for i in [1] %}{{ m() }}{% endfor %}", {}),
    ("namespace_list", "{% set ns = namespace(a=[]) %}{% for m in messages %}"
     "{% set ns.a = ns.a + [m.role] %}{% endfor %}{{ ns.a | join(',') }}", {"messages": MSGS}),
    ("chained_filters", "{{ messages | selectattr('role', 'in', ['user', 'assistant']) | list "
     "| length }} {{ tools | map(attribute='function') | map(attribute='name') | join(', ') }}",
     {"messages": MSGS, "tools": [{"function": {"name": "a"}}, {"function": {"name": "b"}}]}),
    ("chained_get", "{{ d.get('a', {}).get('b') }} {{ d.get('x', {}).get('b', 'none') }}",
     {"d": {"a": {"b": 7}}}),
    ("mixed_conditions", "{% if x is not defined or x is none %}1{% endif %}"
     "{% set y = 'a' if x else 'b' %}{{ y }}{{ (s | trim | length) > 0 }}{{ 'B' < 'a' }}",
     {"x": None, "s": "  "}),
    ("numbers_more", "{{ 2 ** 62 }} {{ 10000000000000000.0 }} {{ 1 / 3 }} {{ 7.0 // 2 }} "
     "{{ -7.5 % 2 }} {{ 3 * 1.5 }} {{ true + 1 }}", {}),
    ("loop_else_filtered", "{% for m in messages if m.role == 'tool' %}{{ m }}{% else %}"
     "no tools{% endfor %}", {"messages": MSGS}),
    ("unary_filter_precedence", "{{ -1 | abs }} {{ not true == false }} {{ -2 ** 2 }}", {}),
    ("error_concat_precedence", "{{ 'a' ~ 1 + 2 }}", {}),
    ("error_undefined_is_defined", "{{ x.y is defined }}", {}),
    ("error_sort_mixed", "{{ [1, 'a'] | sort }}", {}),
    # errors jinja2 reports at render time
    ("error_undefined_attribute", "{{ missing.attr }}", {}),
    ("error_undefined_plus", "{{ m.missing + 'x' }}", {"m": {}}),
    ("error_type_plus", "{{ 'a' + 1 }}", {}),
    ("error_none_plus", "{{ m.content + '!' }}", {"m": {"content": None}}),
    ("error_call_undefined", "{{ nothing() }}", {}),
    ("error_list_append", "{% set l = [] %}{{ l.append(1) }}", {}),
    ("error_tojson_undefined", "{{ missing | tojson }}", {}),
    ("error_division_by_zero", "{{ 1 // 0 }}", {}),
    ("error_compare", "{{ 1 < 'a' }}", {}),
    ("error_big_range", "{% for i in range(1000000) %}{% endfor %}", {}),
    # syntax errors
    ("syntax_unknown_filter", "line1\n{{ x | frobnicate }}", {}),
    ("syntax_unknown_test", "{% if x is frob %}{% endif %}", {}),
    ("syntax_unclosed_if", "{% if true %}\nopen", {}),
    ("syntax_unknown_tag", "a\nb {% frob %}", {}),
    ("syntax_bad_expression", "{{ 1 + }}", {}),
    ("syntax_unclosed_string", "{{ 'abc }}", {}),
    ("syntax_endfor_mismatch", "{% for x in y %}{% endif %}", {}),
]


def render_case(env, source, tokens, messages, tools, add_generation_prompt, extra):
    """jinja2's output for one conversation, or the error it raised."""
    try:
        template = env.from_string(source)
        return {"output": template.render(messages=messages, tools=tools, documents=None,
                                          add_generation_prompt=add_generation_prompt,
                                          bos_token=tokens["bos_token"],
                                          eos_token=tokens["eos_token"], **extra)}
    except jinja2.exceptions.TemplateError as e:
        # raise_exception raises the base class; jinja2's own errors are subclasses.
        raised = type(e) is jinja2.exceptions.TemplateError
        return {"error": "raised" if raised else "failed", "message": str(e)}
    except Exception as e:  # TypeError and friends inside the template: rendering fails
        return {"error": "failed", "message": f"{type(e).__name__}: {e}"}


def write_json(path, value):
    path.write_text(json.dumps(value, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def write_template_goldens(env):
    conversations = {name: {"messages": messages, "tools": tools, "extra_variables": extra}
                     for name, (messages, tools, extra) in CONVERSATIONS.items()}
    write_json(DATA / "conversations.json", conversations)
    for name, config in TEMPLATES.items():
        source = (DATA / f"{name}.jinja").read_bytes().decode("utf-8")
        tokens = {"bos_token": config["bos_token"], "eos_token": config["eos_token"]}
        template_extra = config.get("extra_variables", {})
        cases = []
        for conversation, (messages, tools, extra) in CONVERSATIONS.items():
            for prompt in (True, False):
                variables = {**template_extra, **extra}  # the conversation's win
                result = render_case(env, source, tokens, messages, tools, prompt, variables)
                if config.get("dated") and "output" in result:
                    today = datetime.datetime.now().strftime("%Y-%m-%d")
                    result["output"] = result["output"].replace(today, TODAY_MARK)
                cases.append({"conversation": conversation, "add_generation_prompt": prompt,
                              **result})
        golden = {"template": f"{name}.jinja", **tokens, "extra_variables": template_extra,
                  **({"dated": TODAY_MARK} if config.get("dated") else {}), "cases": cases}
        path = DATA / f"{name}.golden.json"
        write_json(path, golden)
        outputs = sum("output" in c for c in cases)
        print(f"{path.name}: {outputs} rendered, {len(cases) - outputs} errors")


def write_feature_goldens(env):
    cases = []
    for name, template, variables in FEATURES:
        case = {"name": name, "template": template, "variables": variables}
        try:
            case["output"] = env.from_string(template).render(**variables)
        except jinja2.exceptions.TemplateSyntaxError as e:
            case["error"] = "syntax"
            case["message"] = f"line {e.lineno}: {e.message}"
        except jinja2.exceptions.TemplateError as e:
            case["error"] = "raised" if type(e) is jinja2.exceptions.TemplateError else "failed"
            case["message"] = str(e)
        except Exception as e:
            case["error"] = "failed"
            case["message"] = f"{type(e).__name__}: {e}"
        cases.append(case)
    path = DATA / "features.golden.json"
    write_json(path, cases)
    print(f"{path.name}: {len(cases)} snippets")


def main():
    env = make_environment()
    write_template_goldens(env)
    write_feature_goldens(env)


if __name__ == "__main__":
    main()
