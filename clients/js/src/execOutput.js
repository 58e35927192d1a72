// The text the Agents SDK's exec_command / write_stdin tools hand the model.
// The format is the SDK's own (what its built-in sandboxes return, and what
// Codex-trained models expect):
//
//   Chunk ID: <6 hex>
//   Wall time: 0.0150 seconds
//   Process exited with code 0        (or: Process running with session ID 7)
//   Original token count: 1234        (only when the output was truncated)
//   Output:
//   <output>
//
// Truncation keeps the head and the tail of the output within
// maxOutputTokens, counting 4 bytes a token, with a line-count header and a
// "...N tokens truncated..." marker where the middle was cut.
import crypto from 'node:crypto'

const BYTES_PER_TOKEN = 4
const enc = new TextEncoder()
const bytesOf = (s) => enc.encode(s).length
// UTF-8 length of one character of a for..of walk (a lone surrogate is
// encoded as U+FFFD: 3 bytes), without an encoder call per character
const charBytes = (ch) => {
  const cp = ch.codePointAt(0)
  return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4
}
const tokensOf = (bytes) => (bytes <= 0 ? 0 : Math.ceil(bytes / BYTES_PER_TOKEN))
const marker = (tokens) => `...${tokens} tokens truncated...`

/** The longest prefix of s within maxBytes of UTF-8, never splitting a character. */
function headWithin(s, maxBytes) {
  let used = 0
  let end = 0
  for (const ch of s) {
    const b = charBytes(ch)
    if (used + b > maxBytes) break
    used += b
    end += ch.length
  }
  return { text: s.slice(0, end), bytes: used }
}

/** The longest suffix of s within maxBytes of UTF-8, never splitting a character (walked from the end). */
function tailWithin(s, maxBytes) {
  let used = 0
  let i = s.length
  while (i > 0) {
    let start = i - 1
    const lo = s.charCodeAt(start)
    if (lo >= 0xdc00 && lo <= 0xdfff && start > 0) {
      const hi = s.charCodeAt(start - 1)
      if (hi >= 0xd800 && hi <= 0xdbff) start--
    }
    const b = charBytes(s.slice(start, i))
    if (used + b > maxBytes) break
    used += b
    i = start
  }
  return { text: s.slice(i), bytes: used }
}

/**
 * Cut text to maxOutputTokens (4 bytes a token) keeping its head and tail.
 * -> {text, originalTokenCount?}: originalTokenCount only when it was cut.
 */
export function truncateOutput(text, maxOutputTokens) {
  if (maxOutputTokens === undefined || maxOutputTokens === null) return { text }
  const budget = Math.max(0, Math.floor(maxOutputTokens)) * BYTES_PER_TOKEN
  const total = bytesOf(text)
  if (total <= budget) return { text }
  const originalTokenCount = tokensOf(total)
  const lines = text === '' ? 0 : text.split(/\r\n|\r|\n/).length
  let header = `Total output lines: ${lines}\n\n`
  const worstMarker = marker(originalTokenCount)
  if (bytesOf(header) + bytesOf(worstMarker) > budget) header = ''
  const room = budget - bytesOf(header) - bytesOf(worstMarker)
  if (room < 0) return { text: header + headWithin(worstMarker, budget - bytesOf(header)).text, originalTokenCount }
  // each half gets its own budget (a character that does not fit at the
  // head's boundary is not lent to the tail), as the SDK's sandboxes do
  const half = Math.floor(room / 2)
  // the kept text is as UTF-8 would carry it (a lone surrogate becomes U+FFFD)
  const wf = text.toWellFormed()
  const head = headWithin(wf, half)
  const tail = tailWithin(wf.slice(head.text.length), room - half)
  return {
    text: `${header}${head.text}${marker(tokensOf(total - head.bytes - tail.bytes))}${tail.text}`,
    originalTokenCount,
  }
}

/**
 * The tool's text. r: {output, wallTimeSeconds, exitCode?, sessionId?,
 * originalTokenCount?}; a sessionId means the process is still running.
 */
export function formatExecResponse(r) {
  const lines = [
    `Chunk ID: ${crypto.randomBytes(3).toString('hex')}`,
    `Wall time: ${r.wallTimeSeconds.toFixed(4)} seconds`,
  ]
  if (typeof r.sessionId === 'number') lines.push(`Process running with session ID ${r.sessionId}`)
  else if (typeof r.exitCode === 'number') lines.push(`Process exited with code ${r.exitCode}`)
  if (typeof r.originalTokenCount === 'number') lines.push(`Original token count: ${r.originalTokenCount}`)
  lines.push('Output:', r.output)
  return lines.join('\n')
}
