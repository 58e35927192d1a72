// The MCP tool tests, written once and run over both transports
// (stdio.test.mjs: `moat mcp`; http.test.mjs: Streamable HTTP at /mcp) by
// the official SDK Client against a real daemon. Every effect is checked
// through moat's own /v1 API or on the host, not only through MCP.
import assert from 'node:assert/strict'
import fs from 'node:fs'
import { after, before, describe, test } from 'node:test'

import { McpError } from '@modelcontextprotocol/sdk/types.js'

import { Daemon, tag, waitFor, withTimeout } from '../node/daemon.mjs'
import {
  TRANSPORTS, call, ok, png, textOf, v1Image, v1Json, v1List, v1Processes, v1Read,
  v1Sandbox, v1Write,
} from './harness.mjs'

// The tools of COMMON.md / issue 11: every argument, and the required ones.
export const TOOLS = {
  sandbox_create: { args: ['image', 'manifest', 'network'], required: [] },
  sandbox_list: { args: [], required: [] },
  sandbox_delete: { args: ['id'], required: ['id'] },
  exec: { args: ['id', 'cmd', 'cwd', 'timeout_ms', 'yield_ms'], required: ['id', 'cmd'] },
  write_stdin: { args: ['id', 'process_id', 'data', 'yield_ms'], required: ['id', 'process_id', 'data'] },
  read_file: { args: ['id', 'path'], required: ['id', 'path'] },
  write_file: { args: ['id', 'path', 'content'], required: ['id', 'path', 'content'] },
  list_files: { args: ['id', 'path', 'depth'], required: ['id'] },
  apply_patch: { args: ['id', 'patch'], required: ['id', 'patch'] },
  view_image: { args: ['id', 'path'], required: ['id', 'path'] },
}

/** A tool result that must be a failure; its text. */
function failed(r, what) {
  assert.equal(r.isError, true, `${what} should fail, got ${JSON.stringify(r).slice(0, 300)}`)
  const t = textOf(r)
  assert.ok(t.length > 0, `${what}: the failure says nothing`)
  return t
}

export function defineSuite(kind) {
  const connect = TRANSPORTS[kind]
  describe(`MCP over ${kind}`, () => {
    let d, conn, c, sb

    before(async () => {
      d = new Daemon()
      await d.start()
      conn = await connect(d)
      c = conn.client
      sb = ok(await call(c, 'sandbox_create', {}), 'sandbox_create').id
    })
    after(async () => {
      await conn?.close().catch(() => {})
      await d?.stop()
    })

    test('initialize: moat answers with its name and the tools capability; ping works', async () => {
      const info = c.getServerVersion()
      assert.equal(typeof info?.name, 'string')
      assert.match(info.name, /moat/i)
      assert.equal(typeof info.version, 'string')
      assert.ok(c.getServerCapabilities()?.tools, 'no tools capability')
      assert.deepEqual(await c.ping(), {})
    })

    test('tools/list: every tool, with its arguments and only the required ones in required', async () => {
      const { tools } = await c.listTools()
      assert.deepEqual(tools.map((t) => t.name).sort(), Object.keys(TOOLS).sort())
      for (const t of tools) {
        const want = TOOLS[t.name]
        const s = t.inputSchema
        assert.equal(s.type, 'object', `${t.name}: inputSchema.type`)
        assert.deepEqual(Object.keys(s.properties ?? {}).sort(), [...want.args].sort(), `${t.name}: properties`)
        assert.deepEqual([...(s.required ?? [])].sort(), [...want.required].sort(), `${t.name}: required`)
        assert.equal(s.additionalProperties, false, `${t.name}: additionalProperties`)
        for (const [name, p] of Object.entries(s.properties ?? {})) {
          assert.ok(p.type || p.anyOf || p.oneOf, `${t.name}.${name} has no type`)
          assert.ok(p.description, `${t.name}.${name} has no description`)
        }
        assert.ok(t.description && t.description.length > 10, `${t.name}: description`)
      }
    })

    test('sandbox_create, sandbox_list, sandbox_delete: the sandbox exists, is listed, is gone', async () => {
      const r = await call(c, 'sandbox_create', { image: 'host' })
      const made = ok(r, 'sandbox_create')
      assert.match(made.id, /^[a-z0-9]+$/)
      assert.ok(textOf(r).includes(made.id), 'the text names the id')
      const got = await v1Sandbox(d, made.id)
      assert.equal(got.status, 200)
      // structuredContent is /v1's sandbox object
      const v = got.json()
      for (const k of ['id', 'image', 'workspace', 'created_at', 'limits']) assert.deepEqual(made[k], v[k], k)

      const list = ok(await call(c, 'sandbox_list', {}), 'sandbox_list')
      const ids = list.sandboxes.map((b) => b.id).sort()
      assert.ok(ids.includes(made.id) && ids.includes(sb))
      const v1ids = (await v1Json(d, 'GET', '/v1/sandboxes')).sandboxes.map((b) => b.id).sort()
      assert.deepEqual(ids, v1ids)

      const del = ok(await call(c, 'sandbox_delete', { id: made.id }), 'sandbox_delete')
      assert.deepEqual(del, { id: made.id, deleted: true })
      assert.equal((await v1Sandbox(d, made.id)).status, 404)
      const again = failed(await call(c, 'exec', { id: made.id, cmd: 'true' }), 'exec in a deleted sandbox')
      assert.ok(again.includes(made.id), `names the id: ${again}`)
    })

    test('sandbox_create with a manifest: its files are in the sandbox', async () => {
      const made = ok(await call(c, 'sandbox_create', {
        manifest: { entries: { 'hello.txt': { type: 'file', content: 'from the manifest\n' } } },
      }), 'sandbox_create')
      assert.equal((await v1Read(d, made.id, 'hello.txt'))?.toString(), 'from the manifest\n')
      ok(await call(c, 'sandbox_delete', { id: made.id }), 'sandbox_delete')
    })

    test('write_file: the content is in the sandbox (read through /v1)', async () => {
      const content = `héllo ${tag()}\nsecond line\n`
      const r = ok(await call(c, 'write_file', { id: sb, path: 'dir/a.txt', content }), 'write_file')
      assert.equal(r.size, Buffer.byteLength(content))
      assert.ok(r.path.endsWith('dir/a.txt'), r.path)
      assert.equal((await v1Read(d, sb, 'dir/a.txt')).toString(), content)
    })

    test('read_file: the text of a file written through /v1; a binary file is an error naming its size', async () => {
      const content = `line ${tag()}\nünïcödé\n`
      await v1Write(d, sb, 'r.txt', content)
      const r = await call(c, 'read_file', { id: sb, path: 'r.txt' })
      const s = ok(r, 'read_file')
      assert.equal(s.content, content)
      assert.equal(s.size, Buffer.byteLength(content))
      assert.ok(s.path.endsWith('r.txt'))
      assert.ok(textOf(r).includes(content))

      await v1Write(d, sb, 'bin.dat', Buffer.from([0xff, 0xfe, 0x00, 0x80, 0x81]))
      const t = failed(await call(c, 'read_file', { id: sb, path: 'bin.dat' }), 'read_file of a binary file')
      assert.match(t, /binary/i)
      assert.match(t, /\b5\b/)
    })

    test('list_files: the entries /v1 lists', async () => {
      const dir = `tree-${tag()}`
      await v1Write(d, sb, `${dir}/x.txt`, 'x')
      await v1Write(d, sb, `${dir}/sub/y.txt`, 'yy')
      const r = ok(await call(c, 'list_files', { id: sb, path: dir, depth: 2 }), 'list_files')
      const v = await v1List(d, sb, dir, 2)
      assert.deepEqual(r, v)
      assert.deepEqual(r.entries.map((e) => e.name).sort(), ['sub', 'x.txt', 'y.txt'])
      // path defaults to the workspace
      const top = ok(await call(c, 'list_files', { id: sb }), 'list_files')
      assert.ok(top.entries.some((e) => e.name === dir))
    })

    test('exec: exit code, stdout and stderr, in the result and its text', async () => {
      const r = await call(c, 'exec', { id: sb, cmd: 'echo out; echo err >&2; exit 3' })
      const s = ok(r, 'exec')
      assert.equal(s.exit_code, 3)
      assert.equal(s.stdout, 'out\n')
      assert.equal(s.stderr, 'err\n')
      assert.equal(s.timed_out, false)
      const t = textOf(r)
      assert.equal(t.split('\n')[0], 'exit code 3')
      assert.ok(t.indexOf('stdout:') < t.indexOf('out') && t.indexOf('stderr:') > t.indexOf('stdout:'), t)
      assert.ok(t.slice(t.indexOf('stderr:')).includes('err'), t)
      // an argv array and a cwd
      const pwd = ok(await call(c, 'exec', { id: sb, cmd: ['pwd'], cwd: '/tmp' }), 'exec')
      assert.equal(pwd.stdout, '/tmp\n')
      assert.equal(pwd.exit_code, 0)
    })

    test('exec: its effects are in the sandbox (checked through /v1)', async () => {
      const word = tag()
      ok(await call(c, 'exec', { id: sb, cmd: `mkdir -p made && echo ${word} > made/by-exec.txt` }), 'exec')
      assert.equal((await v1Read(d, sb, 'made/by-exec.txt')).toString(), `${word}\n`)
    })

    test('exec: timeout_ms kills the command', async () => {
      const t0 = Date.now()
      const s = ok(await call(c, 'exec', { id: sb, cmd: 'sleep 30', timeout_ms: 300 }), 'exec')
      assert.equal(s.timed_out, true)
      assert.notEqual(s.exit_code, 0)
      assert.ok(Date.now() - t0 < 15_000)
    })

    test('exec with yield_ms, then write_stdin: the same process reads its stdin and exits', async () => {
      const r = await call(c, 'exec', { id: sb, cmd: 'echo ready; read l; echo got:$l; exit 7', yield_ms: 500 })
      const s = ok(r, 'exec')
      assert.equal(s.running, true)
      const pid = s.process_id
      assert.equal(typeof pid, 'number')
      assert.match(textOf(r), new RegExp(`process ${pid} is still running`))
      assert.ok(s.stdout.includes('ready'))
      const procs = await v1Processes(d, sb)
      assert.ok(procs.processes.some((p) => p.process_id === pid && p.running), JSON.stringify(procs))

      const w = await call(c, 'write_stdin', { id: sb, process_id: pid, data: 'hello\n', yield_ms: 10_000 })
      const ws = ok(w, 'write_stdin')
      assert.equal(ws.exit_code, 7)
      assert.ok(ws.stdout.includes('got:hello'), JSON.stringify(ws))
      assert.match(textOf(w), /^exit code 7/)
      await waitFor(async () => !(await v1Processes(d, sb)).processes.some((p) => p.process_id === pid && p.running),
        { what: `process ${pid} gone from /v1` })
    })

    test('exec with a progress token: its output arrives as progress while it runs (SSE)', async () => {
      const seen = []
      const t0 = Date.now()
      const r = await call(c, 'exec', { id: sb, cmd: 'echo first; sleep 1.5; echo second' }, {
        onprogress: (p) => seen.push({ ...p, at: Date.now() - t0 }),
      })
      const done = Date.now() - t0
      const s = ok(r, 'exec')
      assert.equal(s.stdout, 'first\nsecond\n')
      const first = seen.find((p) => (p.message ?? '').includes('first'))
      assert.ok(first, `no progress with the first line: ${JSON.stringify(seen)}`)
      assert.ok(first.at < done - 700, `the first line came at ${first.at} ms, the answer at ${done} ms: not streamed`)
      for (let i = 1; i < seen.length; i++) assert.ok(seen[i].progress > seen[i - 1].progress, 'progress must grow')
    })

    test('apply_patch: several files at once, and a failing hunk changes nothing', async () => {
      const dir = `p-${tag()}`
      await v1Write(d, sb, `${dir}/a.txt`, 'one\ntwo\n')
      await v1Write(d, sb, `${dir}/c.txt`, 'x\ny\n')
      const good = [
        '*** Begin Patch',
        `*** Update File: ${dir}/a.txt`,
        '@@',
        ' one',
        '-two',
        '+TWO',
        `*** Add File: ${dir}/b.txt`,
        '+new file',
        '*** End Patch',
      ].join('\n')
      const r = ok(await call(c, 'apply_patch', { id: sb, patch: good }), 'apply_patch')
      assert.deepEqual(r.files.map((f) => [f.path.replace(/^\/workspace\//, ''), f.op]).sort(),
        [[`${dir}/a.txt`, 'update'], [`${dir}/b.txt`, 'add']])
      assert.equal((await v1Read(d, sb, `${dir}/a.txt`)).toString(), 'one\nTWO\n')
      assert.equal((await v1Read(d, sb, `${dir}/b.txt`)).toString(), 'new file\n')

      const bad = [
        '*** Begin Patch',
        `*** Update File: ${dir}/a.txt`,
        '@@',
        ' one',
        '-TWO',
        '+three',
        `*** Update File: ${dir}/c.txt`,
        '@@',
        '-not there',
        '+z',
        `*** Add File: ${dir}/d.txt`,
        '+never',
        '*** End Patch',
      ].join('\n')
      const t = failed(await call(c, 'apply_patch', { id: sb, patch: bad }), 'a patch with a failing hunk')
      assert.ok(t.includes('c.txt'), `names the file: ${t}`)
      assert.equal((await v1Read(d, sb, `${dir}/a.txt`)).toString(), 'one\nTWO\n')
      assert.equal((await v1Read(d, sb, `${dir}/c.txt`)).toString(), 'x\ny\n')
      assert.equal(await v1Read(d, sb, `${dir}/d.txt`), null)
    })

    test('view_image: MCP image content with the file\'s bytes', async () => {
      const img = png(5, 3)
      await v1Write(d, sb, 'pic.png', img)
      const r = await call(c, 'view_image', { id: sb, path: 'pic.png' })
      assert.ok(!r.isError, textOf(r))
      const im = r.content.find((x) => x.type === 'image')
      assert.ok(im, JSON.stringify(r.content).slice(0, 300))
      assert.equal(im.mimeType, 'image/png')
      assert.ok(Buffer.from(im.data, 'base64').equals(img), 'the bytes differ from the file')
      // /v1's answer without the bytes (they are in the image content once)
      const { data, ...meta } = await v1Image(d, sb, 'pic.png')
      assert.ok(Buffer.from(data, 'base64').equals(img))
      assert.deepEqual(r.structuredContent, meta)
      assert.equal(r.structuredContent.width, 5)
      assert.equal(r.structuredContent.height, 3)
      const t = failed(await call(c, 'view_image', { id: sb, path: 'r.txt' }), 'view_image of a text file')
      assert.ok(t.includes('r.txt') || /image|PNG|JPEG|support/i.test(t), t)
    })

    test('a failing tool is an isError result naming the culprit, and the session keeps working', async () => {
      const ghost = 'nosuchsandbox' + tag(3)
      let t = failed(await call(c, 'read_file', { id: ghost, path: 'a' }), 'an unknown sandbox')
      assert.ok(t.includes(ghost), t)
      t = failed(await call(c, 'exec', { id: sb, cmd: 'true', timeout_ms: 'soon' }), 'a bad argument')
      assert.ok(t.includes('timeout_ms'), t)
      t = failed(await call(c, 'write_file', { id: sb, path: 'x' }), 'a missing argument')
      assert.ok(t.includes('content'), t)
      t = failed(await call(c, 'read_file', { id: sb, path: `missing-${tag()}.txt` }), 'a missing file')
      assert.ok(t.includes('missing-'), t)
      t = failed(await call(c, 'exec', { id: sb, cmd: 'true', bogus: 1 }), 'an unknown argument')
      assert.ok(t.includes('bogus'), t)
      // an unknown tool is a protocol error
      const e = await call(c, 'no_such_tool', {}).then(() => null, (x) => x)
      assert.ok(e instanceof McpError, `expected an McpError, got ${e}`)
      assert.ok(e.message.includes('no_such_tool'), e.message)
      // and the session still works
      assert.deepEqual(await c.ping(), {})
      assert.equal(ok(await call(c, 'exec', { id: sb, cmd: 'echo still' }), 'exec').stdout, 'still\n')
    })

    test('confinement: an exec writing host paths leaves the host unchanged', async () => {
      const canary = `/tmp/moat-mcp-canary-${tag()}`
      const fresh = `/tmp/moat-mcp-fresh-${tag()}`
      fs.writeFileSync(canary, 'host\n', { mode: 0o666 })
      try {
        const s = ok(await call(c, 'exec', {
          id: sb,
          cmd: `echo pwned > ${canary}; echo pwned > ${fresh}; echo pwned > /etc/moat-mcp-${tag()}; ` +
            `echo pwned > ${d.base}/escaped; cat ${d.tokenFile}; true`,
        }), 'exec')
        assert.ok(!s.stdout.includes(d.token), 'the daemon token is readable from the sandbox')
        const w = await call(c, 'write_file', { id: sb, path: `../../../../../..${canary}`, content: 'pwned\n' })
        assert.ok(w.isError || w.structuredContent, 'write_file answered')
        assert.equal(fs.readFileSync(canary, 'utf8'), 'host\n')
        assert.equal(fs.existsSync(fresh), false)
        assert.equal(fs.existsSync(`${d.base}/escaped`), false)
      } finally {
        fs.rmSync(canary, { force: true })
        fs.rmSync(fresh, { force: true })
      }
    })

    test('a cancelled exec does not hold back the session', async () => {
      const ac = new AbortController()
      const t0 = Date.now()
      const pidFile = `cancel-${tag()}.pid`
      const long = call(c, 'exec', { id: sb, cmd: `echo $$ > ${pidFile}; exec sleep 30` }, { signal: ac.signal, timeout: 60_000 })
        .then(() => 'answered', (e) => e)
      await waitFor(async () => (await v1Read(d, sb, pidFile))?.length, { what: 'the exec to start' })
      ac.abort('test cancels')
      const e = await withTimeout(long, 5000, 'the cancelled call to settle')
      assert.notEqual(e, 'answered')
      // the next requests are answered now, not when the sleep ends
      assert.deepEqual(await withTimeout(c.ping(), 5000, 'ping after a cancel'), {})
      const s = ok(await withTimeout(call(c, 'exec', { id: sb, cmd: 'echo after' }), 10_000, 'exec after a cancel'), 'exec')
      assert.equal(s.stdout, 'after\n')
      // and the cancelled command is killed (seen through /v1)
      const probe = `kill -0 $(cat ${pidFile}) 2>/dev/null && echo alive || echo gone`
      await waitFor(async () => {
        const r = await v1Json(d, 'POST', `/v1/sandboxes/${sb}/exec`, { cmd: probe })
        return r.stdout === 'gone\n'
      }, { timeout: 10_000, what: 'the cancelled exec to be killed' })
      assert.ok(Date.now() - t0 < 20_000)
    })

    test('requests in flight together are each answered', async () => {
      const rs = await Promise.all([1, 2, 3, 4].map((i) =>
        call(c, 'exec', { id: sb, cmd: `sleep 0.$((${i} % 3)); echo n${i}` })))
      rs.forEach((r, i) => assert.equal(ok(r, 'exec').stdout, `n${i + 1}\n`))
    })

    test('nothing went wrong on the way (no diagnostics from moat mcp)', () => {
      // every failure above was a tool's or the protocol's, answered by the
      // daemon: the relay had nothing to report (and no sanitizer finding)
      assert.equal(conn.stderr(), '')
    })
  })
}
