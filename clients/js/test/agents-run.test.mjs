// SandboxAgent runs on moat (sandbox: {client}), driven by the SDK's
// ScriptedModel: manifest materialisation, exec, yield + write_stdin,
// apply_patch, view_image, cleanup. Effects are checked through moat's own
// /v1 API (d.v1) while the run is live (inside a modelResponder) and after.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import path from 'node:path'
import { run } from '@openai/agents'
import { Manifest, SandboxAgent, shell, filesystem } from '@openai/agents/sandbox'
import { ScriptedModel, functionCall, assistantMessage, modelResponder } from '@openai/agents/testing'
import { truncateOutput as sdkTruncate } from '@openai/agents-core/sandbox/internal'
import { tag } from '../../../tests/node/daemon.mjs'
import { useDaemon, useHostDir } from './daemon-fixture.mjs'
import { MoatSandboxClient } from '../src/agents.js'
import { agentWith, outputs, parseExec, previousOutput, PNG_1X1 } from './agents-helpers.mjs'

const d = useDaemon()
const hostDir = useHostDir('moat-agents-run-')

const newClient = (mark, extra = {}) => new MoatSandboxClient({ baseUrl: d.url, token: d.token, metadata: { mark }, localSourceBaseDir: hostDir, ...extra })
const listed = async (mark) => (await d.v1('GET', `/v1/sandboxes?metadata.mark=${mark}`)).json().sandboxes
const file = async (id, p) => {
  const r = await d.v1('GET', `/v1/sandboxes/${id}/files?path=${encodeURIComponent(p)}`)
  return r.status === 200 ? r.body : null
}
const stat = async (id, p) => {
  const r = await d.v1('GET', `/v1/sandboxes/${id}/files/stat?path=${encodeURIComponent(p)}`)
  return r.status === 200 ? r.json() : null
}

test('manifest: file, binary file, dir, local_file, local_dir, environment, permissions are in the sandbox', async () => {
  const mark = tag()
  const src = path.join(hostDir, 'm')
  fs.mkdirSync(path.join(src, 'tree', 'sub'), { recursive: true })
  fs.writeFileSync(path.join(src, 'script.sh'), '#!/bin/sh\necho from-local-file\n', { mode: 0o755 })
  fs.writeFileSync(path.join(src, 'tree', 'top.txt'), 'top\n')
  fs.writeFileSync(path.join(src, 'tree', 'sub', 'blob.bin'), Buffer.from([0, 1, 2, 0xff, 0xfe]))
  const bin = new Uint8Array([0x89, 0, 0x10, 0xff, 10])
  const manifest = new Manifest({
    entries: {
      'notes/readme.txt': { type: 'file', content: 'manifest file content\n' },
      'data.bin': { type: 'file', content: bin },
      'locked.txt': { type: 'file', content: 'ro\n', permissions: { owner: 4, group: 4, other: 0 } },
      src: { type: 'dir', children: { 'main.py': { type: 'file', content: 'print(1)\n' }, empty: { type: 'dir' } } },
      'bin/run.sh': { type: 'local_file', src: 'm/script.sh' },
      vendored: { type: 'local_dir', src: path.join(src, 'tree') },
    },
    environment: { PLAIN: 'plain-value', RESOLVED: { value: '', resolve: async () => 'resolved-value' } },
  })
  let seen = null
  const { agent, model } = agentWith([
    [functionCall('exec_command', { cmd: 'cat notes/readme.txt; echo "$PLAIN $RESOLVED"; ./bin/run.sh; cat vendored/top.txt; pwd' }, { callId: 'c1' })],
    modelResponder(async () => {
      const [b] = await listed(mark)
      seen = {
        id: b.id,
        readme: (await file(b.id, 'notes/readme.txt')).toString(),
        bin: new Uint8Array(await file(b.id, 'data.bin')),
        locked: (await stat(b.id, 'locked.txt')).mode,
        main: (await file(b.id, 'src/main.py')).toString(),
        empty: (await stat(b.id, 'src/empty'))?.type,
        script: await stat(b.id, 'bin/run.sh'),
        top: (await file(b.id, 'vendored/top.txt')).toString(),
        blob: new Uint8Array(await file(b.id, 'vendored/sub/blob.bin')),
      }
      return [assistantMessage('done')]
    }),
  ], { agent: { defaultManifest: manifest } })
  const result = await run(agent, 'go', { sandbox: { client: newClient(mark) }, maxTurns: 5 })
  model.assertComplete()
  const x = parseExec(outputs(result).get('c1'))
  assert.equal(x.exitCode, 0)
  assert.equal(x.output, 'manifest file content\nplain-value resolved-value\nfrom-local-file\ntop\n/workspace\n')
  assert.equal(seen.readme, 'manifest file content\n')
  assert.deepEqual(seen.bin, bin)
  assert.equal(seen.locked, 0o440)
  assert.equal(seen.main, 'print(1)\n')
  assert.equal(seen.empty, 'dir')
  assert.equal(seen.script.mode & 0o777, 0o755)
  assert.equal(seen.top, 'top\n')
  assert.deepEqual(seen.blob, new Uint8Array([0, 1, 2, 0xff, 0xfe]))
  // the owned sandbox is gone once the run is over
  assert.deepEqual(await listed(mark), [])
  assert.equal((await d.v1('GET', `/v1/sandboxes/${seen.id}`)).status, 404)
})

test('exec: exit codes, stderr, workdir, login shell, truncation in the SDK format', async () => {
  const mark = tag()
  const { agent } = agentWith([
    [functionCall('exec_command', { cmd: 'echo out; echo err >&2; exit 7' }, { callId: 'e1' })],
    [functionCall('exec_command', { cmd: 'pwd', workdir: 'deep/er' }, { callId: 'e2' })],
    [functionCall('exec_command', { cmd: 'kill -TERM $$' }, { callId: 'e3' })],
    [functionCall('exec_command', { cmd: 'seq 1 3000', max_output_tokens: 25 }, { callId: 'e4' })],
    [functionCall('exec_command', { cmd: 'echo "${BASH_VERSION:+bash}"; shopt -q login_shell && echo login', login: true }, { callId: 'e5' })],
    [functionCall('exec_command', { cmd: 'echo "${BASH_VERSION:-no bash}"', login: false }, { callId: 'e6' })],
    [functionCall('exec_command', { cmd: 'true', workdir: 'no/such/dir' }, { callId: 'e7' })],
    [assistantMessage('done')],
  ], { agent: { defaultManifest: new Manifest({ entries: { 'deep/er/x': { type: 'file', content: '' } } }) } })
  const result = await run(agent, 'go', { sandbox: { client: newClient(mark) }, maxTurns: 10 })
  const o = outputs(result)
  let x = parseExec(o.get('e1'))
  assert.equal(x.exitCode, 7)
  assert.equal(x.output, 'out\nerr\n')
  assert.ok(x.wall >= 0 && x.wall < 30)
  assert.equal(parseExec(o.get('e2')).output, '/workspace/deep/er\n')
  assert.equal(parseExec(o.get('e3')).exitCode, 128 + 15)
  x = parseExec(o.get('e4'))
  let full = ''
  for (let i = 1; i <= 3000; i++) full += `${i}\n`
  const want = sdkTruncate(full, 25)
  assert.equal(x.originalTokenCount, want.originalTokenCount)
  assert.equal(x.output, want.text)
  assert.match(x.output, /^Total output lines: 3001\n\n1\n2\n/)
  assert.match(x.output, /tokens truncated\.\.\..*\n3000\n$/s)
  assert.equal(parseExec(o.get('e5')).output, 'bash\nlogin\n')
  assert.equal(parseExec(o.get('e6')).output, 'no bash\n')
  // a bad workdir is an error the model reads (naming it), not a crash of the run
  assert.match(JSON.stringify(o.get('e7')), /no\/such\/dir/)
  assert.deepEqual(await listed(mark), [])
})

test('yield and write_stdin: session ids are moat process ids; stdin; ^C; tty; unknown session', async () => {
  const mark = tag()
  const procs = {}
  const sid = (call, id) => parseExec(previousOutput(call, id)).sessionId
  const { agent } = agentWith([
    [functionCall('exec_command', { cmd: 'read line; echo "got:$line"; sleep 0.3; echo bye', yield_time_ms: 150 }, { callId: 'y1' })],
    modelResponder(async (call) => {
      const [b] = await listed(mark)
      procs.first = (await d.v1('GET', `/v1/sandboxes/${b.id}/processes`)).json().processes
      return [functionCall('write_stdin', { session_id: sid(call, 'y1'), chars: 'hello\n', yield_time_ms: 3000 }, { callId: 'y2' })]
    }),
    [functionCall('exec_command', { cmd: 'echo started; sleep 60', yield_time_ms: 200 }, { callId: 'y3' })],
    modelResponder((call) => [functionCall('write_stdin', { session_id: sid(call, 'y3'), chars: '\u0003', yield_time_ms: 3000 }, { callId: 'y4' })]),
    modelResponder(async () => {
      const [b] = await listed(mark)
      procs.afterInt = (await d.v1('GET', `/v1/sandboxes/${b.id}/processes`)).json().processes
      return [functionCall('exec_command', { cmd: 'cat', tty: true, yield_time_ms: 200 }, { callId: 'y5' })]
    }),
    modelResponder((call) => [functionCall('write_stdin', { session_id: sid(call, 'y5'), chars: 'typed\n', yield_time_ms: 300 }, { callId: 'y6' })]),
    modelResponder((call) => [functionCall('write_stdin', { session_id: sid(call, 'y5'), chars: '\u0003', yield_time_ms: 2000 }, { callId: 'y7' })]),
    [functionCall('write_stdin', { session_id: 4242, chars: 'x' }, { callId: 'y8' })],
    [assistantMessage('done')],
  ])
  const result = await run(agent, 'go', { sandbox: { client: newClient(mark) }, maxTurns: 15 })
  const o = outputs(result)
  const y1 = parseExec(o.get('y1'))
  assert.equal(typeof y1.sessionId, 'number')
  assert.equal(y1.exitCode, undefined)
  assert.ok(procs.first.some((p) => p.process_id === y1.sessionId && p.running), JSON.stringify(procs.first))
  const y2 = parseExec(o.get('y2'))
  assert.equal(y2.exitCode, 0)
  assert.equal(y2.output, 'got:hello\nbye\n')
  const y3 = parseExec(o.get('y3'))
  assert.equal(y3.output, 'started\n')
  const y4 = parseExec(o.get('y4'))
  assert.equal(y4.exitCode, 128 + 2, o.get('y4'))
  assert.ok(!procs.afterInt.some((p) => p.process_id === y3.sessionId && p.running), JSON.stringify(procs.afterInt))
  assert.match(parseExec(o.get('y6')).output, /typed/)
  assert.equal(parseExec(o.get('y7')).exitCode, 128 + 2)
  const y8 = parseExec(o.get('y8'))
  assert.equal(y8.exitCode, 1)
  assert.match(y8.output, /session not found: 4242/)
  assert.deepEqual(await listed(mark), [])
})

test('apply_patch: add, update, move, pure move, delete; a failing hunk and a smuggled section change nothing', async () => {
  const mark = tag()
  let id
  const snapshots = {}
  const tree = async () => {
    const l = (await d.v1('GET', `/v1/sandboxes/${id}/files/list?path=.&depth=8`)).json().entries
    const out = {}
    for (const e of l) out[e.path] = e.type === 'file' ? (await file(id, e.path)).toString() : e.type
    return out
  }
  const ap = (callId, operation) => [{ type: 'apply_patch_call', callId, status: 'completed', operation }]
  const { agent } = agentWith([
    ap('p1', { type: 'create_file', path: 'out/new.txt', diff: '+line 1\n+line 2\n' }),
    ap('p2', { type: 'update_file', path: '/workspace/out/new.txt', diff: '@@\n-line 1\n+LINE 1\n line 2\n' }),
    ap('p3', { type: 'update_file', path: 'keep.txt', moveTo: 'moved/keep2.txt', diff: '@@\n one\n-two\n+TWO\n' }),
    ap('p4', { type: 'update_file', path: 'gone.txt', moveTo: 'renamed.txt', diff: '' }),
    ap('p5', { type: 'delete_file', path: 'del.txt' }),
    modelResponder(async () => {
      const [b] = await listed(mark)
      id = b.id
      snapshots.before = await tree()
      return ap('p6', { type: 'update_file', path: 'out/new.txt', diff: '@@\n-this line is not there\n+x\n' })
    }),
    modelResponder(async () => {
      snapshots.afterFail = await tree()
      return ap('p7', { type: 'update_file', path: 'out/new.txt', diff: '@@\n-LINE 1\n+L1\n*** Delete File: renamed.txt\n' })
    }),
    modelResponder(async () => {
      snapshots.afterSmuggle = await tree()
      return ap('p8', { type: 'update_file', path: 'missing.txt', diff: '@@\n-a\n+b\n' })
    }),
    [assistantMessage('done')],
  ], {
    agent: {
      defaultManifest: new Manifest({
        entries: {
          'keep.txt': { type: 'file', content: 'one\ntwo\n' },
          'gone.txt': { type: 'file', content: 'bytes stay\n' },
          'del.txt': { type: 'file', content: 'bye\n' },
        },
      }),
    },
  })
  const result = await run(agent, 'go', { sandbox: { client: newClient(mark) }, maxTurns: 12 })
  const o = outputs(result)
  for (const c of ['p1', 'p2', 'p3', 'p4', 'p5']) assert.equal(o.get(c).status, 'completed', `${c}: ${JSON.stringify(o.get(c))}`)
  const t = snapshots.before
  // Add File: every + line ends with a newline (Codex's and moat's rule)
  assert.equal(t['/workspace/out/new.txt'], 'LINE 1\nline 2\n')
  assert.equal(t['/workspace/moved/keep2.txt'], 'one\nTWO\n')
  assert.equal(t['/workspace/keep.txt'], undefined)
  assert.equal(t['/workspace/renamed.txt'], 'bytes stay\n')
  assert.equal(t['/workspace/gone.txt'], undefined)
  assert.equal(t['/workspace/del.txt'], undefined)
  assert.equal(o.get('p6').status, 'failed')
  assert.match(o.get('p6').output, /new\.txt/)
  assert.match(o.get('p6').output, /this line is not there/)
  assert.deepEqual(snapshots.afterFail, snapshots.before)
  assert.equal(o.get('p7').status, 'failed')
  assert.match(o.get('p7').output, /not a diff line/)
  assert.deepEqual(snapshots.afterSmuggle, snapshots.before)
  assert.equal(o.get('p8').status, 'failed')
  assert.match(o.get('p8').output, /missing\.txt/)
  assert.deepEqual(await listed(mark), [])
})

test('view_image: a PNG reaches the model as an image; a missing or non-image path is a message', async () => {
  const mark = tag()
  const { agent, model } = agentWith([
    [functionCall('view_image', { path: 'img/dot.png' }, { callId: 'v1' })],
    [functionCall('view_image', { path: '/workspace/notes.txt' }, { callId: 'v2' })],
    [functionCall('view_image', { path: 'nope.png' }, { callId: 'v3' })],
    [assistantMessage('done')],
  ], {
    agent: {
      defaultManifest: new Manifest({
        entries: { 'img/dot.png': { type: 'file', content: new Uint8Array(PNG_1X1) }, 'notes.txt': { type: 'file', content: 'text\n' } },
      }),
    },
  })
  const result = await run(agent, 'go', { sandbox: { client: newClient(mark) }, maxTurns: 6 })
  const o = outputs(result)
  const img = JSON.stringify(o.get('v1'))
  assert.ok(img.includes(PNG_1X1.toString('base64')), img.slice(0, 300))
  assert.match(img, /image\/png/)
  // what the next model request carried
  const sent = JSON.stringify(model.calls[1].request.input)
  assert.ok(sent.includes(`data:image/png;base64,${PNG_1X1.toString('base64')}`), sent.slice(0, 500))
  assert.match(String(o.get('v2')), /not a supported image file/)
  assert.match(String(o.get('v3')), /was not found/)
  assert.deepEqual(await listed(mark), [])
})

test('cleanup: the runner deletes its sandbox with one DELETE; session.delete and client.delete are idempotent', async () => {
  const mark = tag()
  const deletes = []
  const realFetch = globalThis.fetch
  globalThis.fetch = (url, init) => {
    if (init?.method === 'DELETE' && /\/v1\/sandboxes\/[a-z0-9]+$/.test(String(url))) deletes.push(String(url))
    return realFetch(url, init)
  }
  try {
    const { agent } = agentWith([[functionCall('exec_command', { cmd: 'true' }, { callId: 'k1' })], [assistantMessage('done')]])
    await run(agent, 'go', { sandbox: { client: newClient(mark) }, maxTurns: 4 })
    assert.equal(deletes.length, 1, deletes.join(' '))
    assert.deepEqual(await listed(mark), [])

    const client = newClient(mark)
    const session = await client.create({ manifest: new Manifest() })
    assert.equal((await listed(mark)).length, 1)
    deletes.length = 0
    await Promise.all([session.delete(), session.close(), session.delete()])
    assert.equal(deletes.length, 1)
    assert.equal((await d.v1('GET', `/v1/sandboxes/${session.state.sandboxId}`)).status, 404)
    await client.delete(session.state) // already gone: fine
    assert.equal(await session.running(), false)
  } finally {
    globalThis.fetch = realFetch
  }
})

test('session file API (readFile, listDir, pathExists, directoryExists, materializeEntry) against /v1', async () => {
  const mark = tag()
  const client = newClient(mark)
  const session = await client.create({ manifest: new Manifest({ entries: { 'd/a.txt': { type: 'file', content: 'hello world\n' } } }) })
  const id = session.state.sandboxId
  try {
    await d.v1('PUT', `/v1/sandboxes/${id}/files?path=d/sub/b.bin`, new Uint8Array([1, 2, 3]))
    assert.deepEqual(Buffer.from(await session.readFile({ path: 'd/a.txt' })).toString(), 'hello world\n')
    assert.deepEqual(Buffer.from(await session.readFile({ path: '/workspace/d/a.txt', maxBytes: 5 })).toString(), 'hello')
    const e = await session.readFile({ path: 'nope' }).catch((x) => x)
    assert.equal(e?.code, 'workspace_read_not_found', String(e))
    const l = await session.listDir({ path: 'd' })
    assert.deepEqual(l.sort((x, y) => x.name.localeCompare(y.name)), [
      { name: 'a.txt', path: 'd/a.txt', type: 'file' },
      { name: 'sub', path: 'd/sub', type: 'dir' },
    ])
    const nd = await session.listDir({ path: 'no/dir' }).catch((x) => x)
    assert.equal(nd?.code, 'workspace_read_not_found', String(nd))
    assert.equal(await session.pathExists('d/sub/b.bin'), true)
    assert.equal(await session.pathExists('/workspace/nope'), false)
    assert.equal(await session.directoryExists('d/sub'), true)
    assert.equal(await session.directoryExists('d/a.txt'), false)
    fs.writeFileSync(path.join(hostDir, 'late.txt'), 'late\n')
    await session.materializeEntry({ path: 'later/late.txt', entry: { type: 'local_file', src: 'late.txt' } })
    assert.equal((await file(id, 'later/late.txt')).toString(), 'late\n')
    await assert.rejects(session.materializeEntry({ path: 'r', entry: { type: 'git_repo', repo: 'o/n' } }), /cloned when the sandbox is created/)
    await assert.rejects(session.materializeEntry({ path: 'x', entry: { type: 'file', content: 'x' }, runAs: 'bob' }), /runAs "bob"/)
    assert.equal(await stat(id, 'x'), null)
  } finally {
    await session.delete()
  }
})

test('sandbox.cwd scopes the tools to a workspace subdirectory; an explicit shell is used', async () => {
  const mark = tag()
  const { agent } = agentWith([
    [functionCall('exec_command', { cmd: 'pwd; ls' }, { callId: 'w1' })],
    [{ type: 'apply_patch_call', callId: 'w2', status: 'completed', operation: { type: 'create_file', path: 'made.txt', diff: '+m\n' } }],
    [functionCall('exec_command', { cmd: 'echo "$0"', shell: '/bin/bash', login: false }, { callId: 'w3' })],
    modelResponder(async () => {
      const [b] = await listed(mark)
      return [assistantMessage(String(await file(b.id, 'proj/made.txt')))]
    }),
  ], { agent: { defaultManifest: new Manifest({ entries: { 'proj/in.txt': { type: 'file', content: 'x\n' } } }) } })
  const r = await run(agent, 'go', { sandbox: { client: newClient(mark), cwd: 'proj' }, maxTurns: 6 })
  const o = outputs(r)
  assert.equal(parseExec(o.get('w1')).output, '/workspace/proj\nin.txt\n')
  assert.equal(o.get('w2').status, 'completed')
  assert.equal(parseExec(o.get('w3')).output, '/bin/bash\n')
  assert.equal(r.finalOutput, 'm\n')
})

test('Chat Completions transport: a freeform multi-file patch reaches moat one file at a time; view_image as a data URL', async () => {
  // the SDK picks its function-tool fallbacks for model classes named *ChatCompletions*
  class ScriptedChatCompletionsModel extends ScriptedModel {}
  const mark = tag()
  let after = null
  const model = new ScriptedChatCompletionsModel([
    [functionCall('apply_patch', { patch: '*** Begin Patch\n*** Add File: new.txt\n+n1\n+n2\n*** Update File: old.txt\n@@\n-absent line\n+x\n*** Update File: other.txt\n@@\n-o\n+O\n*** End Patch\n' }, { callId: 'cc1' })],
    [functionCall('view_image', { path: 'dot.png' }, { callId: 'cc2' })],
    modelResponder(async () => {
      const [b] = await listed(mark)
      after = { n: (await file(b.id, 'new.txt')).toString(), old: (await file(b.id, 'old.txt')).toString(), other: (await file(b.id, 'other.txt')).toString() }
      return [assistantMessage('done')]
    }),
  ])
  const agent = new SandboxAgent({
    name: 'cc', model, capabilities: [shell(), filesystem()],
    defaultManifest: new Manifest({ entries: {
      'old.txt': { type: 'file', content: 'old\n' },
      'other.txt': { type: 'file', content: 'o\n' },
      'dot.png': { type: 'file', content: new Uint8Array(PNG_1X1) },
    } }),
  })
  const r = await run(agent, 'go', { sandbox: { client: newClient(mark) }, maxTurns: 5 })
  assert.ok(model.calls[0].request.tools.some((t) => t.type === 'function' && t.name === 'apply_patch'))
  const o = outputs(r)
  const text = String(o.get('cc1'))
  assert.match(text, /Created new\.txt/)
  assert.match(text, /old\.txt: could not find context/)
  assert.match(text, /Updated other\.txt/)
  // each operation is all or nothing; the SDK carries on after a failed one
  assert.deepEqual(after, { n: 'n1\nn2\n', old: 'old\n', other: 'O\n' })
  assert.ok(String(o.get('cc2')).includes(`data:image/png;base64,${PNG_1X1.toString('base64')}`), String(o.get('cc2')).slice(0, 200))
  assert.deepEqual(await listed(mark), [])
})
