// Sending a firmware update to the router in pieces (webui/homework_webui/updates.py), resuming
// where the router says it stopped: a phone's Wi-Fi may drop in the middle of 150 MB.

/** What sending one piece can end in: accepted, or the router holds `received` bytes so far. */
export type PieceAnswer = { ok: true } | { ok: false; received: number }
export type PutPiece = (offset: number, piece: Blob) => Promise<PieceAnswer>

/** Sends `file` in pieces of `chunk` bytes, in order. A piece the router did not expect (the
 * answer to the one before was lost, so it was sent again) continues from where the router is.
 * A piece that fails otherwise throws (from `put`); `progress` hears the bytes the router has. */
export async function sendInPieces(file: Blob, chunk: number, put: PutPiece,
                                   progress: (received: number) => void = () => {}): Promise<void> {
  let offset = 0
  let resumed = 0
  while (offset < file.size) {
    const answer = await put(offset, file.slice(offset, offset + chunk))
    if (answer.ok) {
      offset = Math.min(offset + chunk, file.size)
    } else {
      // The router is the truth; but one that keeps disagreeing is not making progress.
      if (++resumed > 3 || answer.received < 0 || answer.received > file.size) {
        throw new Error('The router and this page disagree about the upload; start it again.')
      }
      offset = answer.received
    }
    progress(offset)
  }
}
