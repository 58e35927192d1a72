// What moat cannot honour is refused early with an error naming it, and no
// sandbox is left behind; the git_repo refusal of the daemon reaches the
// user. Also: the exec text and its truncation match the SDK's own.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import path from 'node:path'
import { run } from '@openai/agents'
import { Manifest, SandboxUnsupportedFeatureError, s3Mount, gitRepo } from '@openai/agents/sandbox'
import { functionCall, assistantMessage } from '@openai/agents/testing'
import { truncateOutput as sdkTruncate, formatExecResponse as sdkFormat } from '@openai/agents-core/sandbox/internal'
import { rejection } from '../../../tests/node/daemon.mjs'
import { useDaemon, useHostDir } from './daemon-fixture.mjs'
import { MoatError } from '../src/client.js'
import { MoatSandboxClient } from '../src/agents.js'
import { truncateOutput, formatExecResponse } from '../src/execOutput.js'
import { agentWith } from './agents-helpers.mjs'

const d = useDaemon()
const hostDir = useHostDir('moat-agents-refuse-')

const all = async () => (await d.v1('GET', '/v1/sandboxes')).json().sandboxes
const client = () => new MoatSandboxClient({ baseUrl: d.url, token: d.token, localSourceBaseDir: hostDir })

async function refused(manifestInit, pattern, { Err = SandboxUnsupportedFeatureError, createArgs = {} } = {}) {
  const before = (await all()).length
  const e = await rejection(client().create({ manifest: new Manifest(manifestInit), ...createArgs }))
  assert.ok(e instanceof Err, `${e?.constructor?.name}: ${e?.message}`)
  assert.match(e.message, pattern)
  assert.equal((await all()).length, before, 'a refused create leaves no sandbox')
  return e
}

test('mounts, users, groups, extraPathGrants, entry groups, other roots and git subpaths are refused, naming them', async () => {
  await refused({ entries: { data: s3Mount({ bucket: 'b' }) } }, /manifest\.entries\["data"\]: s3_mount entries are not supported/)
  await refused({ entries: { d: { type: 'dir', children: { deep: { type: 'mount', source: 'x' } } } } }, /manifest\.entries\["d\/deep"\]: mount entries/)
  await refused({ users: [{ name: 'bob' }] }, /manifest\.users \(bob\)/)
  await refused({ groups: [{ name: 'devs', users: [] }] }, /manifest\.groups \(devs\)/)
  await refused({ root: '/srv' }, /manifest\.root must be \/workspace/)
  await refused({ entries: { r: gitRepo({ repo: 'o/n', subpath: 'lib' }) } }, /manifest\.entries\["r"\]: git_repo subpath/)
  await refused({ entries: { r: { type: 'weird' } } }, /entry type "weird" is not supported/)
  const m = new Manifest({ extraPathGrants: [{ path: '/opt/data' }] })
  const e = await rejection(client().create({ manifest: m }))
  assert.ok(e instanceof SandboxUnsupportedFeatureError, String(e))
  assert.match(e.message, /extraPathGrants \(\/opt\/data\)/)
})

test('bad local sources, options and snapshots are refused before any sandbox exists', async () => {
  fs.mkdirSync(path.join(hostDir, 'withlink'), { recursive: true })
  fs.writeFileSync(path.join(hostDir, 'withlink', 'ok.txt'), 'ok\n')
  fs.symlinkSync('/etc/passwd', path.join(hostDir, 'withlink', 'passwd'))
  await refused({ entries: { l: { type: 'local_dir', src: 'withlink' } } }, /do not support symbolic links/, { Err: Error })
  await refused({ entries: { l: { type: 'local_file', src: 'nope.txt' } } }, /manifest\.entries\["l"\]: cannot read .*nope\.txt: ENOENT/, { Err: Error })
  await refused({ entries: { l: { type: 'local_file', src: '/etc/hostname' } } }, /outside the local source base directory/, { Err: Error })
  await refused({}, /unknown sandbox option "cpu"/, { Err: Error, createArgs: { options: { cpu: 2 } } })
  await refused({}, /snapshot "local" is not supported/, { createArgs: { snapshot: { type: 'local' } } })
})

test('runAs is refused when the agent runs as another user', async () => {
  const before = (await all()).length
  const { agent } = agentWith([[functionCall('exec_command', { cmd: 'id' }, { callId: 'r1' })], [assistantMessage('done')]], { agent: { runAs: 'bob' } })
  const e = await rejection(run(agent, 'go', { sandbox: { client: client() }, maxTurns: 3 }))
  assert.ok(e instanceof SandboxUnsupportedFeatureError, `${e?.constructor?.name}: ${e?.message}`)
  assert.match(e.message, /bob/)
  assert.equal((await all()).length, before)
})

test('git_repo: the daemon refuses it without a network allowlist, and that error reaches the user of run()', async () => {
  const before = (await all()).length
  const { agent } = agentWith([[assistantMessage('never')]], {
    agent: { defaultManifest: new Manifest({ entries: { repo: gitRepo({ repo: 'openai/openai-agents-js', ref: 'main' }) } }) },
  })
  const e = await rejection(run(agent, 'go', { sandbox: { client: client() }, maxTurns: 3 }))
  assert.ok(e instanceof MoatError, `${e?.constructor?.name}: ${e?.message}`)
  assert.equal(e.status, 400)
  assert.match(e.message, /manifest\.entries\.repo/)
  assert.match(e.message, /https:\/\/github\.com\/openai\/openai-agents-js\.git/)
  assert.match(e.message, /no network/)
  assert.equal((await all()).length, before)
  // and with an allowlist the daemon's operator did not grant (no --net-allow): refused too, naming it
  const c = new MoatSandboxClient({ baseUrl: d.url, token: d.token, network: { allow: ['github.com'] } })
  const e2 = await rejection(c.create({ manifest: new Manifest({ entries: { repo: gitRepo({ repo: 'o/n' }) } }) }))
  assert.ok(e2 instanceof MoatError, String(e2))
  assert.match(e2.message, /--net-allow/)
  assert.equal((await all()).length, before)
})

test('exec text and truncation are the SDK\'s own (its formatter as the oracle)', () => {
  const samples = ['', 'one line', 'a\nb\nc\n', 'é'.repeat(500), 'a\ud800b\udc00c😀'.repeat(40), `${'x'.repeat(3000)}\n${'y'.repeat(3000)}`, '😀 mixed\r\nlines\n'.repeat(200)]
  for (const s of samples) {
    for (const n of [0, 1, 3, 10, 64, 1000, undefined]) {
      assert.deepEqual(truncateOutput(s, n), sdkTruncate(s, n), `${JSON.stringify(s.slice(0, 20))} @ ${n}`)
    }
  }
  const strip = (t) => t.replace(/^Chunk ID: [0-9a-f]{6}\n/, 'Chunk ID: X\n')
  for (const r of [
    { output: 'hi\n', wallTimeSeconds: 0.01234, exitCode: 0 },
    { output: '', wallTimeSeconds: 1, sessionId: 7 },
    { output: 'cut', wallTimeSeconds: 2.5, exitCode: 3, originalTokenCount: 99 },
  ]) {
    assert.equal(strip(formatExecResponse(r)), strip(sdkFormat(r)))
  }
})
