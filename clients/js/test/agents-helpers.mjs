// Shared by the agents-*.test.mjs files: a real daemon, SandboxAgent runs
// driven by the SDK's ScriptedModel, and readers of what the model was given.
import { setTracingDisabled } from '@openai/agents'
import { SandboxAgent, shell, filesystem } from '@openai/agents/sandbox'
import { ScriptedModel } from '@openai/agents/testing'

setTracingDisabled(true)

export const PNG_1X1 = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==', 'base64')

export function agentWith(steps, opts = {}) {
  const model = new ScriptedModel(steps)
  const agent = new SandboxAgent({ name: opts.name ?? 'moat-test', model, capabilities: [shell(), filesystem()], ...opts.agent })
  return { model, agent }
}

/** callId -> what the model got back: a string (exec text), {status, output} (apply_patch), or the raw output. */
export function outputs(result) {
  const m = new Map()
  for (const it of result.newItems) {
    if (it.type !== 'tool_call_output_item') continue
    const r = it.rawItem
    if (r.type === 'apply_patch_call_output') m.set(r.callId, { status: r.status, output: r.output })
    else if (r.output?.type === 'text') m.set(r.callId, r.output.text)
    else m.set(r.callId, r.output)
  }
  return m
}

/** Every tool output the model was given (not the calls), for "this never reached the model" checks. */
export function allOutputText(result) {
  return JSON.stringify(result.newItems.filter((i) => i.type === 'tool_call_output_item').map((i) => i.rawItem))
}

/** The exec text's parts, checking the SDK's layout line by line. */
export function parseExec(text) {
  const lines = text.split('\n')
  const out = { raw: text }
  let i = 0
  const m0 = /^Chunk ID: ([0-9a-f]{6})$/.exec(lines[i++])
  if (!m0) throw new Error(`no Chunk ID line in ${JSON.stringify(text)}`)
  const m1 = /^Wall time: (\d+\.\d{4}) seconds$/.exec(lines[i++])
  if (!m1) throw new Error(`no Wall time line in ${JSON.stringify(text)}`)
  out.wall = Number(m1[1])
  let m = /^Process exited with code (-?\d+)$/.exec(lines[i])
  if (m) {
    out.exitCode = Number(m[1])
    i++
  } else if ((m = /^Process running with session ID (\d+)$/.exec(lines[i]))) {
    out.sessionId = Number(m[1])
    i++
  }
  if ((m = /^Original token count: (\d+)$/.exec(lines[i]))) {
    out.originalTokenCount = Number(m[1])
    i++
  }
  if (lines[i++] !== 'Output:') throw new Error(`no Output: line in ${JSON.stringify(text)}`)
  out.output = lines.slice(i).join('\n')
  return out
}

/** The text output of an earlier call, from inside a modelResponder. */
export function previousOutput(call, callId) {
  for (const item of call.request.input) {
    if (item.type === 'function_call_result' && item.callId === callId) return item.output?.text ?? item.output
  }
  throw new Error(`no output of ${callId} in the request`)
}
