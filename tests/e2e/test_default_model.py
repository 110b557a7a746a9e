"""The model scripts/serve serves by default (Qwen2.5-Coder-1.5B-Instruct Q4_K_M, 1.1 GB, which
scripts/setup fetches) behind the gateway, driven by the official SDKs: the README's question
gets the right answer, and an openai-agents agent on tool_choice auto calls its function tool
and answers from what the tool returned. Short prompts and bounded outputs: the model decodes
at about 10 tokens/s on two busy cores."""
import asyncio

import agents
import pytest

from gateway_harness import recording_async_client
from server_harness import SERVE_MODEL, Server

pytestmark = pytest.mark.skipif(not SERVE_MODEL.exists(),
                                reason=f"{SERVE_MODEL} is absent: scripts/setup fetches it")

# No model can know it: in the final answer only if the tool's result reached the prompt.
LOCKER_CODE = "QX-4417-ZB"


@pytest.fixture(scope="module")
def server():  # conftest's gateway, client and model fixtures stand in front of this one
    with Server(model=SERVE_MODEL) as s:
        yield s


def test_the_readme_question_is_answered_right(client, model):
    answer = client.chat.completions.create(
        model=model, max_tokens=20, temperature=0,
        messages=[{"role": "user", "content": "What is the capital of France?"}])
    assert "Paris" in answer.choices[0].message.content


def test_an_agent_on_auto_calls_its_tool_and_answers_from_the_result(gateway, model):
    agents.set_tracing_disabled(True)
    asked, bodies = [], []

    @agents.function_tool
    def lookup_locker_code(employee: str) -> str:
        """The code of an employee's locker.

        Args:
            employee: The employee's name.
        """
        asked.append(employee)
        return LOCKER_CODE

    async def run():
        client = recording_async_client(gateway, bodies)
        settings = agents.ModelSettings(tool_choice="auto", temperature=0, max_tokens=60)
        # Told to answer once the tool has: otherwise the 1.5B calls it again on every turn.
        agent = agents.Agent(
            name="lockers", tools=[lookup_locker_code], model_settings=settings,
            instructions="You answer questions about lockers with the lookup_locker_code "
                         "tool, then give the user its result.",
            model=agents.OpenAIChatCompletionsModel(model=model, openai_client=client))
        return await agents.Runner.run(agent, "What is the locker code of Alice?", max_turns=3)

    result = asyncio.run(run())
    assert asked == ["Alice"]
    # The call on auto; the SDK then leaves tool_choice out, which is auto too.
    assert len(bodies) == 2 and bodies[0]["tool_choice"] == "auto"
    assert bodies[1].get("tool_choice", "auto") == "auto"
    # The second request carries the result, and the prompt the server renders from it too.
    second = bodies[1]
    assert [m["content"] for m in second["messages"] if m["role"] == "tool"] == [LOCKER_CODE]
    prompt = gateway.http.post("/tokenize", json={"model": model, "messages": second["messages"],
                                                  "tools": second["tools"]}).json()["prompt"]
    assert f"<tool_response>\n{LOCKER_CODE}\n</tool_response>" in prompt
    assert LOCKER_CODE in result.final_output
