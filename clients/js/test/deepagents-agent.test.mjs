// Real createDeepAgent agents, driven by a scripted chat model (no network),
// whose tools run in moat sandboxes through MoatBackend. Effects are checked
// through moat's /v1 API (d.v1) and on the host.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import path from 'node:path'
import { tag, withTimeout } from '../../../tests/node/daemon.mjs'
import { useDaemon, useHostDir, clientOpts } from './daemon-fixture.mjs'
import { createDeepAgent } from 'deepagents'
import { MoatSandbox } from '../src/client.js'
import { MoatBackend } from '../src/deepagents.js'
import { ScriptedChatModel, toolResults, text } from './deepagents-fake-model.mjs'

const d = useDaemon()
const hostDir = useHostDir('moat-deep-agent-host-')
const opts = clientOpts(d)

const file = async (id, p) => {
  const r = await d.v1('GET', `/v1/sandboxes/${id}/files?path=${encodeURIComponent(p)}`)
  return r.status === 200 ? r.body.toString() : r.status
}

/** Runs a scripted agent: turns is a list of tool-call lists, then the final text. */
async function run(backend, turns, final = 'done') {
  const model = new ScriptedChatModel((_msgs, turn) =>
    turn < turns.length ? { tool_calls: turns[turn] } : { content: final })
  const agent = createDeepAgent({ model, backend })
  const out = await withTimeout(agent.invoke({ messages: [{ role: 'user', content: 'do the task' }] }, { recursionLimit: 100 }),
    120_000, 'the deep agent run')
  return { model, out, results: toolResults(out.messages), last: out.messages[out.messages.length - 1] }
}
const call = (id, name, args) => ({ id, name, args })

test('a deep agent fixes a failing check with execute, ls, glob, grep, read_file, edit_file, write_file, delete', async () => {
  const sb = await MoatSandbox.create(opts)
  const backend = new MoatBackend(sb)
  const check = '#!/bin/sh\nif [ "$(cat /workspace/proj/value.txt)" = "42" ]; then echo PASS; else echo "FAIL: want 42" >&2; exit 1; fi\n'
  const { model, results, last } = await run(backend, [
    [
      call('w1', 'write_file', { file_path: '/workspace/proj/check.sh', content: check }),
      call('w2', 'write_file', { file_path: '/workspace/proj/value.txt', content: '41\n' }),
      call('w3', 'write_file', { file_path: '/workspace/proj/scratch/tmp.txt', content: 'temporary\n' }),
    ],
    [call('x1', 'execute', { command: 'sh /workspace/proj/check.sh' })],
    [
      call('l1', 'ls', { path: '/workspace/proj' }),
      call('g1', 'glob', { pattern: '**/*.sh', path: '/workspace' }),
      call('s1', 'grep', { pattern: 'want 42', path: '/workspace/proj' }),
      call('r1', 'read_file', { file_path: '/workspace/proj/value.txt' }),
    ],
    [call('e1', 'edit_file', { file_path: '/workspace/proj/value.txt', old_string: '41', new_string: '42' })],
    [
      call('x2', 'execute', { command: 'sh /workspace/proj/check.sh' }),
      call('d1', 'delete', { file_path: '/workspace/proj/scratch' }),
    ],
  ], 'fixed: value.txt now holds 42')

  // the model was offered the sandbox tools, execute among them
  for (const t of ['execute', 'ls', 'read_file', 'write_file', 'edit_file', 'glob', 'grep', 'delete']) {
    assert.ok(model.toolNames.includes(t), `tool ${t} not offered: ${model.toolNames}`)
  }
  assert.equal(model.calls.length, 6)
  assert.equal(text(last), 'fixed: value.txt now holds 42')

  const r = (id) => text(results.get(id))
  if (process.env.MOAT_DEEP_DUMP) for (const [k, v] of results) console.log(k, JSON.stringify(text(v)))
  assert.match(r('w1'), /Successfully wrote to '\/workspace\/proj\/check.sh'/)
  assert.equal(r('x1'), 'FAIL: want 42\n\n[Command failed with exit code 1]')
  assert.deepEqual(r('l1').split('\n').sort(), [
    '/workspace/proj/check.sh (' + Buffer.byteLength(check) + ' bytes)',
    '/workspace/proj/scratch/ (directory)',
    '/workspace/proj/value.txt (3 bytes)',
  ])
  assert.equal(r('g1'), '/workspace/proj/check.sh')
  assert.match(r('s1'), /^\/workspace\/proj\/check.sh:\n +2: if .*FAIL: want 42/)
  assert.equal(r('r1'), '@@ lines 1-1 of 1 @@\n41')
  assert.match(r('e1'), /Successfully replaced 1 occurrence\(s\) in '\/workspace\/proj\/value.txt'/)
  assert.equal(r('x2'), 'PASS\n\n[Command succeeded with exit code 0]')
  assert.match(r('d1'), /Deleted \/workspace\/proj\/scratch/)

  // the effects, through moat's own API
  assert.equal(await file(sb.id, '/workspace/proj/value.txt'), '42\n')
  assert.equal(await file(sb.id, '/workspace/proj/check.sh'), check)
  assert.equal(await file(sb.id, '/workspace/proj/scratch/tmp.txt'), 404)
  const x = (await d.v1('POST', `/v1/sandboxes/${sb.id}/exec`, { cmd: 'sh /workspace/proj/check.sh' })).json()
  assert.equal(x.exit_code, 0)
  assert.equal(x.stdout, 'PASS\n')
  await sb.delete()
})

test('tool errors reach the model as text naming the path; the run carries on', async () => {
  const backend = await MoatBackend.create(opts)
  try {
    const { results } = await run(backend, [[
      call('r1', 'read_file', { file_path: '/workspace/none.txt' }),
      call('w1', 'write_file', { file_path: '/usr/moat-agent-test.txt', content: 'x' }),
      call('e1', 'edit_file', { file_path: '/workspace/none.txt', old_string: 'a', new_string: 'b' }),
      call('l1', 'ls', { path: '/proc' }),
      call('x1', 'execute', { command: 'exit 7' }),
    ]])
    assert.match(text(results.get('r1')), /\/workspace\/none.txt.*No such file or directory/)
    assert.match(text(results.get('w1')), /\/usr\/moat-agent-test.txt: Read-only file system/)
    assert.match(text(results.get('e1')), /cannot edit '\/workspace\/none.txt'/)
    assert.match(text(results.get('l1')), /\/proc.*outside the sandbox/)
    assert.equal(text(results.get('x1')), '\n[Command failed with exit code 7]')
    assert.equal((await d.v1('GET', `/v1/sandboxes/${backend.id}/files/stat?path=/usr/moat-agent-test.txt`)).status, 404)
  } finally {
    await backend.close()
  }
  assert.equal((await d.v1('GET', `/v1/sandboxes/${backend.id}`)).status, 404)
})

test('confinement: an agent aiming its tools at host files changes and reads nothing on the host', async () => {
  const secret = path.join(hostDir, 'secret.txt')
  fs.writeFileSync(secret, 'the host secret\n')
  const before = fs.statSync(secret)
  const backend = await MoatBackend.create(opts)
  try {
    const { results } = await run(backend, [
      [
        call('r1', 'read_file', { file_path: secret }),
        call('x1', 'execute', { command: `cat ${secret} ${d.tokenFile}; ls ${hostDir}` }),
      ],
      [
        call('w1', 'write_file', { file_path: secret, content: 'overwritten by the agent\n' }),
        call('x2', 'execute', { command: `echo appended >> ${secret}; rm -f ${d.tokenFile}; ln -sf /proc/1/root/${secret} /workspace/l; echo x > /workspace/l` }),
        call('w2', 'write_file', { file_path: `/proc/1/root${secret}`, content: 'through proc\n' }),
      ],
    ])
    assert.doesNotMatch(text(results.get('r1')), /the host secret/)
    const x1 = text(results.get('x1'))
    assert.doesNotMatch(x1, /the host secret/)
    assert.ok(!x1.includes(d.token))
    assert.match(text(results.get('w2')), /outside the sandbox/)
    // the agent's writes went to the sandbox's own /tmp
    assert.equal(await file(backend.id, secret), 'overwritten by the agent\nappended\n')
  } finally {
    await backend.close()
  }
  assert.equal(fs.readFileSync(secret, 'utf8'), 'the host secret\n')
  const after = fs.statSync(secret)
  assert.equal(after.ino, before.ino)
  assert.equal(after.mtimeMs, before.mtimeMs)
  assert.equal(fs.readFileSync(d.tokenFile, 'utf8').trim(), d.token)
})

test('two agents in parallel, each in its own sandbox made from a manifest', async () => {
  const mark = tag()
  const mk = (who) => MoatBackend.create({
    ...opts,
    metadata: { mark, who },
    manifest: { entries: { 'who.txt': { type: 'file', content: `${who}\n` } } },
  })
  const [a, b] = await Promise.all([mk('a'), mk('b')])
  try {
    const script = (who) => [
      [call(`r-${who}`, 'read_file', { file_path: '/workspace/who.txt' })],
      [call(`x-${who}`, 'execute', { command: `sleep 0.2; echo "$(cat /workspace/who.txt)-ran" > /workspace/out.txt; ls /workspace` })],
    ]
    const [ra, rb] = await Promise.all([run(a, script('a')), run(b, script('b'))])
    assert.match(text(ra.results.get('r-a')), /\ba\b/)
    assert.match(text(rb.results.get('r-b')), /\bb\b/)
    assert.equal(await file(a.id, '/workspace/out.txt'), 'a-ran\n')
    assert.equal(await file(b.id, '/workspace/out.txt'), 'b-ran\n')
    assert.notEqual(a.id, b.id)
    const listed = (await d.v1('GET', `/v1/sandboxes?metadata.mark=${mark}`)).json().sandboxes
    assert.equal(listed.length, 2)
  } finally {
    await Promise.all([a.close(), b.close()])
  }
  assert.equal((await d.v1('GET', `/v1/sandboxes?metadata.mark=${mark}`)).json().sandboxes.length, 0)
})

test('binary files through the agent: read_file answers an image block, write_file takes base64', async () => {
  const backend = await MoatBackend.create(opts)
  try {
    const png = Buffer.from('89504e470d0a1a0a0000000d49484452000000010000000108020000009077' +
      '53de0000000c4944415408d763f8cfc000000301010018dd8db00000000049454e44ae426082', 'hex')
    const put = await d.v1('PUT', `/v1/sandboxes/${backend.id}/files?path=/workspace/dot.png`, png)
    assert.equal(put.status, 204)
    const bytes = Buffer.from([0, 1, 2, 0xff, 0xfe])
    const { results } = await run(backend, [[
      call('r1', 'read_file', { file_path: '/workspace/dot.png' }),
      call('w1', 'write_file', { file_path: '/workspace/out/blob.pdf', content: bytes.toString('base64') }),
    ]])
    const c = results.get('r1').content
    assert.ok(Array.isArray(c), JSON.stringify(c).slice(0, 200))
    const img = c.find((p) => p.type === 'image')
    assert.ok(img, JSON.stringify(c).slice(0, 300))
    assert.equal(img.mimeType ?? img.mime_type, 'image/png')
    assert.deepEqual(Buffer.from(img.data, 'base64'), png)
    const got = await d.v1('GET', `/v1/sandboxes/${backend.id}/files?path=/workspace/out/blob.pdf`)
    assert.deepEqual(got.body, bytes)
  } finally {
    await backend.close()
  }
})
