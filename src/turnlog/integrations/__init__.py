"""Memory for the agent frameworks people already use, one module per framework.

Each module is behind its own extra and imports its framework; `import turnlog` never imports
this package. See docs/integrations/.

- `turnlog.integrations.openai_agents`: a `Session` for the OpenAI Agents SDK
  (`pip install 'turnlog[openai-agents]'`).
- `turnlog.integrations.langchain`: a chat message history and an agent middleware for
  LangChain (`pip install 'turnlog[langchain]'`).
- `turnlog.integrations.pydantic_ai`: a history processor for pydantic-ai
  (`pip install 'turnlog[pydantic-ai]'`).
"""
