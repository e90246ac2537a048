"""tiny-agent's `lookup` task as a LangGraph agent (`ChatOpenAI(base_url=...)`), trained unchanged.

No lakeflow import: lakeflow's gateway calls `play(task, client)` once per episode. The graph may run
the model twice (call, then answer), like the `lookup` environment.
"""

from __future__ import annotations

from typing import Any

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.errors import GraphRecursionError
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from lookup_openai import score


def play(task: dict[str, Any], client: dict[str, str], call_credit: float = 0.0) -> float:
    calls = []

    @tool
    def lookup() -> str:
        """Return the value."""
        calls.append(1)
        return task["answer"]

    chat = ChatOpenAI(base_url=client["base_url"], api_key=client["api_key"], model=client["model"], max_retries=0)
    model = chat.bind_tools([lookup])

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", call_model)
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)  # a tool call goes to the tools, else the end
    builder.add_edge("tools", "model")
    graph = builder.compile()
    try:  # model, tools, model: four steps of the graph at most
        state = graph.invoke({"messages": task["messages"]}, {"recursion_limit": 4})
    except GraphRecursionError:
        return 0.0
    return score(str(state["messages"][-1].content), task["answer"], bool(calls), False, call_credit)
