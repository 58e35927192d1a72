// Shared by the E2B end-to-end tests: the generic daemon of tests/node/daemon.mjs
// with an E2B-shaped key (e2b_<40 hex>, what `moat token` makes), a check
// that the E2B door answers, and the three environment variables a user sets
// to point the unchanged `e2b` SDK at it (E2B_API_URL, E2B_SANDBOX_URL,
// E2B_API_KEY).
import { Daemon as BaseDaemon, MOAT_BIN, withTimeout } from '../node/daemon.mjs'
export * from '../node/daemon.mjs'

export class Daemon extends BaseDaemon {
  static tmpPrefix = '/tmp/moat-e2b-'

  async ready() {
    // The door must be there: an empty list, not moat's 401 / 404.
    let r, body
    try {
      r = await fetch(`${this.url}/v2/sandboxes`, { headers: { 'X-API-KEY': this.token }, signal: AbortSignal.timeout(10_000) })
      body = await r.text()
    } catch (e) {
      body = String(e)
    }
    let list
    try {
      list = JSON.parse(body)
    } catch {}
    if (!r || r.status !== 200 || !Array.isArray(list)) {
      throw new Error(`moat serve (${MOAT_BIN}) does not speak E2B: GET /v2/sandboxes with X-API-KEY answered ` +
        `${r ? r.status : 'nothing'} ${String(body).slice(0, 300)}`)
    }
  }

  /** What a user sets to point the SDK here. */
  e2bEnv() {
    return { E2B_API_URL: this.url, E2B_SANDBOX_URL: this.url, E2B_API_KEY: this.token }
  }

  /** Set them in this process (each test file runs in its own process). */
  useEnv() {
    Object.assign(process.env, this.e2bEnv())
    delete process.env.E2B_DEBUG
    delete process.env.E2B_DOMAIN
  }

}

/** A started daemon whose address the SDK picks up from the environment. */
export async function startDaemon(opts) {
  const d = new Daemon(opts)
  await d.start()
  d.useEnv()
  return d
}

/** Kill sandboxes, ignoring failures (for after-hooks). */
export async function killAll(sandboxes) {
  await Promise.all(sandboxes.filter(Boolean).map((s) => withTimeout(s.kill(), 20_000, 'kill').catch(() => {})))
}

