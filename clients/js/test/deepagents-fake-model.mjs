// A scripted chat model for Deep Agents tests (no network): each call of the
// model hands the conversation so far to the script, which answers with the
// next AIMessage (tool calls, or the final text). Written for these tests;
// @langchain/core's fakes answer fixed lists and cannot look at tool results.
import { BaseChatModel } from '@langchain/core/language_models/chat_models'
import { AIMessage } from '@langchain/core/messages'

export class ScriptedChatModel extends BaseChatModel {
  /** script(messages, turn) -> AIMessage | {content?, tool_calls?} (may be async). */
  constructor(script) {
    super({})
    this.script = script
    this.turn = 0
    this.calls = [] // the messages of each call, for assertions
    this.toolNames = []
  }

  _llmType() {
    return 'scripted'
  }

  bindTools(tools) {
    this.toolNames = tools.map((t) => t.name ?? t.function?.name)
    return this
  }

  async _generate(messages) {
    this.calls.push(messages)
    const turn = this.turn++
    let out = await this.script(messages, turn)
    if (!(out instanceof AIMessage)) {
      const tc = (out.tool_calls || []).map((c, i) => ({ id: c.id ?? `call_${turn}_${i}`, type: 'tool_call', ...c }))
      out = new AIMessage({ content: out.content ?? '', tool_calls: tc })
    }
    return { generations: [{ text: typeof out.content === 'string' ? out.content : '', message: out }] }
  }
}

/** The ToolMessages of a conversation, by tool_call_id. */
export function toolResults(messages) {
  const m = new Map()
  for (const x of messages) if (x._getType?.() === 'tool' || x.type === 'tool') m.set(x.tool_call_id, x)
  return m
}

export function text(msg) {
  const c = msg?.content
  if (typeof c === 'string') return c
  if (Array.isArray(c)) return c.map((p) => (typeof p === 'string' ? p : p.text ?? '')).join('')
  return ''
}
