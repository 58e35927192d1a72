// The preamble the *.test.mjs files share: one real daemon per test file
// (tests/node/daemon.mjs), started before the file's tests and stopped
// after them (which deletes what they left), and host directories removed
// after them. Call these at the top level of a test file.
import { before, after } from 'node:test'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Daemon } from '../../../tests/node/daemon.mjs'

/** A Daemon (args as new Daemon's), started by the file's before hook and stopped by its after hook. */
export function useDaemon(args) {
  const d = new Daemon(args)
  before(() => d.start())
  after(() => d.stop())
  return d
}

/** The options MoatSandbox and MoatSandboxClient take to reach d: read when a test uses them (once d started). */
export const clientOpts = (d) => ({
  get baseUrl() { return d.url },
  get token() { return d.token },
})

/** A new directory on the host (in the temp dir, named prefix + random), removed after the file's tests. */
export function useHostDir(prefix, { mode } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix))
  if (mode !== undefined) fs.chmodSync(dir, mode)
  after(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}
