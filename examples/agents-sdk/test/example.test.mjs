// The example end to end with the SDK's scripted model (no network): the
// agent runs the tests, patches calc.py and runs them again, all in a real
// moat sandbox. Effects are checked through moat's own /v1 API, and the
// repository on the host must be unchanged.
import assert from 'node:assert/strict'
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { test } from 'node:test'
import { setTracingDisabled } from '@openai/agents'
import { ScriptedModel, functionCall, assistantMessage } from '@openai/agents/testing'
import { MoatSandboxClient } from 'moat-sandbox'
import { useDaemon } from '../../../tests/node/daemon.mjs'
import { REPO, fixRepo } from '../agent.mjs'

setTracingDisabled(true)

const d = useDaemon()

const treeHash = (dir) => {
  const h = crypto.createHash('sha256')
  for (const n of fs.readdirSync(dir).sort()) {
    const p = path.join(dir, n)
    if (fs.statSync(p).isFile()) h.update(n).update(fs.readFileSync(p))
  }
  return h.digest('hex')
}

/** The text of the tool output the model got for callId, from its recorded requests. */
function toolOutput(model, callId) {
  for (const c of model.calls) {
    for (const item of c.request.input ?? []) {
      if (item && item.callId === callId && typeof item.output !== 'undefined') {
        const o = item.output
        return typeof o === 'string' ? o : (o?.text ?? JSON.stringify(o))
      }
    }
  }
  return undefined
}

test('the scripted agent fixes the failing test inside the sandbox', async () => {
  const before = treeHash(REPO)
  const fix = '@@ def mean(values):\n' +
    '     if not values:\n' +
    '         raise ValueError("mean of an empty sequence")\n' +
    '-    return sum(values) / (len(values) + 1)\n' +
    '+    return sum(values) / len(values)\n'
  const model = new ScriptedModel([
    [functionCall('exec_command', { cmd: 'cd repo && python3 -m unittest 2>&1 | tail -1' }, { callId: 't1' })],
    [{ type: 'apply_patch_call', callId: 'p1', status: 'completed',
      operation: { type: 'update_file', path: 'repo/calc.py', diff: fix } }],
    [functionCall('exec_command', { cmd: 'cd repo && python3 -m unittest 2>&1 | tail -1' }, { callId: 't2' })],
    [assistantMessage('mean() divided by len(values) + 1; it now divides by len(values).')],
  ])
  const client = new MoatSandboxClient({ baseUrl: d.url, token: d.token })
  const { output, session } = await fixRepo({ client, model })
  try {
    assert.match(output, /len\(values\)/)
    assert.match(toolOutput(model, 't1'), /Process exited with code 0[\s\S]*FAILED \(failures=1\)/)
    assert.match(toolOutput(model, 't2'), /Output:\nOK\n/)
    model.assertComplete?.()

    // the effect, seen through moat's own API
    const id = session.state.sandboxId
    const f = await d.v1('GET', `/v1/sandboxes/${id}/files?path=repo/calc.py`)
    assert.equal(f.status, 200)
    assert.match(f.body.toString(), /return sum\(values\) \/ len\(values\)\n/)
    const r = await d.v1('POST', `/v1/sandboxes/${id}/exec`, { cmd: 'cd repo && python3 -m unittest', cwd: '/workspace' })
    assert.equal(r.json().exit_code, 0, r.body.toString())
  } finally {
    await client.delete(session.state)
  }
  // the host's repository is untouched, and the sandbox is gone
  assert.equal(treeHash(REPO), before)
  const l = await d.v1('GET', '/v1/sandboxes')
  assert.deepEqual(l.json().sandboxes, [])
})
