// The SDK's Skills capability on moat: inline skills and a `from` directory
// are materialised at create time; lazy skills from a host directory are
// loaded into the live sandbox by load_skill (materializeEntry). Checked
// through moat's /v1 API.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import path from 'node:path'
import { run } from '@openai/agents'
import { SandboxAgent, shell, filesystem, skills, localDir } from '@openai/agents/sandbox'
import { ScriptedModel, functionCall, assistantMessage, modelResponder } from '@openai/agents/testing'
import { tag } from '../../../tests/node/daemon.mjs'
import { useDaemon, useHostDir } from './daemon-fixture.mjs'
import { MoatSandboxClient } from '../src/agents.js'
import { outputs, parseExec } from './agents-helpers.mjs'

const d = useDaemon()
const hostDir = useHostDir('moat-agents-skills-')

const SKILL = '---\nname: greet\ndescription: says hi politely\n---\nSay hi.\n'
const listed = async (mark) => (await d.v1('GET', `/v1/sandboxes?metadata.mark=${mark}`)).json().sandboxes
const file = async (id, p) => {
  const r = await d.v1('GET', `/v1/sandboxes/${id}/files?path=${encodeURIComponent(p)}`)
  return r.status === 200 ? r.body.toString() : null
}

async function runWith(cap, steps) {
  const mark = tag()
  const model = new ScriptedModel(steps(mark))
  const agent = new SandboxAgent({ name: 'sk', model, capabilities: [shell(), filesystem(), cap] })
  const client = new MoatSandboxClient({ baseUrl: d.url, token: d.token, metadata: { mark }, localSourceBaseDir: hostDir })
  const r = await run(agent, 'go', { sandbox: { client }, maxTurns: 6 })
  assert.deepEqual(await listed(mark), [])
  return { r, model }
}

test('inline skills and a `from` directory are in the sandbox and in the instructions', async () => {
  for (const cap of [
    skills({ skills: [{ name: 'greet', description: 'says hi politely', content: SKILL, scripts: { 'run.sh': { type: 'file', content: 'echo hi\n' } } }] }),
    skills({ from: { type: 'dir', children: { greet: { type: 'dir', children: { 'SKILL.md': { type: 'file', content: SKILL } } } } } }),
  ]) {
    let seen
    const { model } = await runWith(cap, (mark) => [
      modelResponder(async () => {
        const [b] = await listed(mark)
        seen = await file(b.id, '.agents/greet/SKILL.md')
        return [assistantMessage('done')]
      }),
    ])
    assert.equal(seen, SKILL)
    assert.match(JSON.stringify(model.calls[0].request.systemInstructions), /says hi politely/)
  }
})

test('lazy skills from a host directory: load_skill copies the skill into the live sandbox', async () => {
  fs.mkdirSync(path.join(hostDir, 'lib', 'greet'), { recursive: true })
  fs.writeFileSync(path.join(hostDir, 'lib', 'greet', 'SKILL.md'), SKILL)
  let before
  let afterLoad
  const cap = skills({ lazyFrom: { source: localDir({ src: 'lib' }), index: [{ name: 'greet', description: 'says hi politely' }] } })
  const { r } = await runWith(cap, (mark) => [
    modelResponder(async () => {
      const [b] = await listed(mark)
      before = await file(b.id, '.agents/greet/SKILL.md')
      return [functionCall('load_skill', { skill_name: 'greet' }, { callId: 'l1' })]
    }),
    modelResponder(async () => {
      const [b] = await listed(mark)
      afterLoad = await file(b.id, '.agents/greet/SKILL.md')
      return [functionCall('exec_command', { cmd: 'cat .agents/greet/SKILL.md' }, { callId: 'l2' })]
    }),
    [functionCall('load_skill', { skill_name: 'greet' }, { callId: 'l3' })],
    [assistantMessage('done')],
  ])
  const o = outputs(r)
  assert.equal(before, null, 'not there before load_skill')
  assert.match(String(o.get('l1')), /"status":"loaded"/)
  assert.equal(afterLoad, SKILL)
  assert.equal(parseExec(o.get('l2')).output, SKILL)
  assert.match(String(o.get('l3')), /already_loaded/)
})
