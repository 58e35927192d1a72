// Two agents in parallel in two sandboxes, and confinement asserted on the
// host: what the agent's tools try against host files changes nothing on
// the host and brings no host secret back into any tool output.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { run } from '@openai/agents'
import { Manifest } from '@openai/agents/sandbox'
import { functionCall, assistantMessage, modelResponder } from '@openai/agents/testing'
import { tag } from '../../../tests/node/daemon.mjs'
import { useDaemon, useHostDir } from './daemon-fixture.mjs'
import { MoatSandboxClient } from '../src/agents.js'
import { agentWith, outputs, parseExec, allOutputText } from './agents-helpers.mjs'

const d = useDaemon()
const hostDir = useHostDir('moat-agents-confine-', { mode: 0o755 })

const listed = async (mark) => (await d.v1('GET', `/v1/sandboxes?metadata.mark=${mark}`)).json().sandboxes

test('two agents run in parallel, each in its own sandbox, neither sees the other', async () => {
  const mark = tag()
  const ids = {}
  const mk = (name) => agentWith([
    [functionCall('exec_command', { cmd: `echo ${name} > mine.txt; sleep 0.3; ls; cat mine.txt` }, { callId: `${name}-1` })],
    modelResponder(async () => {
      ids[name] = (await listed(mark)).map((b) => b.id)
      return [functionCall('exec_command', { cmd: 'cat who.txt' }, { callId: `${name}-2` })]
    }),
    [assistantMessage('done')],
  ], { name, agent: { defaultManifest: new Manifest({ entries: { 'who.txt': { type: 'file', content: `${name}\n` } } }) } })
  const a = mk('alpha')
  const b = mk('beta')
  const client = new MoatSandboxClient({ baseUrl: d.url, token: d.token, metadata: { mark } })
  const [ra, rb] = await Promise.all([
    run(a.agent, 'go', { sandbox: { client }, maxTurns: 5 }),
    run(b.agent, 'go', { sandbox: { client }, maxTurns: 5 }),
  ])
  for (const [name, r] of [['alpha', ra], ['beta', rb]]) {
    const o = outputs(r)
    assert.equal(parseExec(o.get(`${name}-1`)).output, `mine.txt\nwho.txt\n${name}\n`)
    assert.equal(parseExec(o.get(`${name}-2`)).output, `${name}\n`)
  }
  // both sandboxes were live at once, and both are gone now
  assert.equal(new Set([...ids.alpha, ...ids.beta]).size, 2, JSON.stringify(ids))
  assert.ok(ids.alpha.length === 2 || ids.beta.length === 2, JSON.stringify(ids))
  assert.deepEqual(await listed(mark), [])
})

test('confinement: host files are neither read nor written by exec, apply_patch, view_image or the manifest', async () => {
  const mark = tag()
  const secret = `host-secret-${crypto.randomBytes(12).toString('hex')}`
  const secretFile = path.join(hostDir, 'secret.txt')
  fs.writeFileSync(secretFile, `${secret}\n`, { mode: 0o644 })
  const target = path.join(hostDir, 'target.txt')
  fs.writeFileSync(target, 'original\n', { mode: 0o666 })
  const png = path.join(hostDir, 'host.png')
  fs.writeFileSync(png, Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==', 'base64'))
  const newFile = path.join(hostDir, 'planted.txt')
  const ap = (callId, operation) => [{ type: 'apply_patch_call', callId, status: 'completed', operation }]
  const { agent } = agentWith([
    [functionCall('exec_command', { cmd: `cat ${secretFile}; echo pwned > ${target}; echo planted > ${newFile}; ls ${hostDir}; grep -r ${secret.slice(0, 16)} /tmp /home 2>/dev/null | head -3` }, { callId: 'x1' })],
    [functionCall('exec_command', { cmd: `cat /proc/1/root${secretFile}; cat ../..${secretFile}; ls -la /proc/1/root/ | head -3`, workdir: '/workspace' }, { callId: 'x2' })],
    [functionCall('exec_command', { cmd: 'true', workdir: hostDir }, { callId: 'x3' })],
    ap('x4', { type: 'update_file', path: target, diff: '@@\n-original\n+patched\n' }),
    ap('x5', { type: 'create_file', path: `../../..${newFile}`, diff: '+planted\n' }),
    ap('x6', { type: 'delete_file', path: target }),
    [functionCall('view_image', { path: png }, { callId: 'x7' })],
    [functionCall('exec_command', { cmd: `ln -s ${secretFile} link.txt; cat link.txt` }, { callId: 'x8' })],
    [assistantMessage('done')],
  ])
  const client = new MoatSandboxClient({ baseUrl: d.url, token: d.token, metadata: { mark } })
  const r = await run(agent, 'go', { sandbox: { client }, maxTurns: 12 })
  const o = outputs(r)
  if (process.env.MOAT_TEST_DEBUG) console.log(o)
  // the host is as it was
  assert.equal(fs.readFileSync(target, 'utf8'), 'original\n')
  assert.equal(fs.existsSync(newFile), false)
  assert.deepEqual(fs.readdirSync(hostDir).sort(), ['host.png', 'secret.txt', 'target.txt'])
  // no tool output carries the secret or the host's listing
  const all = allOutputText(r)
  assert.ok(!all.includes(secret), 'the host secret reached the model')
  assert.ok(!/host\.png\\nsecret\.txt/.test(all), 'the host directory listing reached the model')
  // and the attempts failed visibly, rather than hitting a copy that looks like the host
  assert.notEqual(parseExec(o.get('x1')).exitCode, undefined)
  assert.equal(parseExec(o.get('x3')).exitCode, 1)
  for (const c of ['x4', 'x6']) assert.equal(o.get(c).status, 'failed', `${c}: ${JSON.stringify(o.get(c))}`)
  assert.match(String(o.get('x7')), /not found|unable|not a supported/)
  assert.deepEqual(await listed(mark), [])

  // a manifest local source outside the client's localSourceBaseDir is refused
  const c2 = new MoatSandboxClient({ baseUrl: d.url, token: d.token, metadata: { mark }, localSourceBaseDir: path.join(hostDir, 'sub') })
  await assert.rejects(c2.create({ manifest: new Manifest({ entries: { s: { type: 'local_file', src: secretFile } } }) }),
    /outside the local source base directory/)
  assert.deepEqual(await listed(mark), [])
})
