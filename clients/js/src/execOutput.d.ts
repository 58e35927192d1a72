// Types of src/execOutput.js: the Agents SDK's exec tool text, and its head+tail truncation.

/** Cut text to maxOutputTokens (4 bytes a token), keeping head and tail; originalTokenCount only when cut. */
export declare function truncateOutput(text: string, maxOutputTokens?: number | null): { text: string; originalTokenCount?: number }

/** "Chunk ID / Wall time / Process exited with code N | Process running with session ID N / [Original token count] / Output:" */
export declare function formatExecResponse(r: {
  output: string
  wallTimeSeconds: number
  exitCode?: number | null
  sessionId?: number
  originalTokenCount?: number
}): string
