import { describe, expect, it } from 'vitest'
import { sendInPieces, type PieceAnswer } from './update'

/** A router that keeps what it is sent in order, like updates.UpdateSpool. */
function router(loseAnswerAt: number[] = []) {
  const got: number[] = []
  let received = 0
  const put = async (offset: number, piece: Blob): Promise<PieceAnswer> => {
    if (offset !== received) return { ok: false, received }
    got.push(...new Uint8Array(await piece.arrayBuffer()))
    received += piece.size
    if (loseAnswerAt.includes(offset)) {
      loseAnswerAt.splice(loseAnswerAt.indexOf(offset), 1)
      throw new Error('lost')
    }
    return { ok: true }
  }
  return { got, put }
}

const file = new Blob([new Uint8Array(Array.from({ length: 25 }, (_, i) => i))])

describe('sending an update in pieces', () => {
  it('sends every byte once, in order, and reports progress', async () => {
    const r = router()
    const seen: number[] = []
    await sendInPieces(file, 10, r.put, (n) => seen.push(n))
    expect(r.got).toEqual(Array.from({ length: 25 }, (_, i) => i))
    expect(seen).toEqual([10, 20, 25])
  })
  it('continues from where the router is when an answer was lost and the piece is sent again', async () => {
    const r = router([10])
    let retried = false
    const put = async (offset: number, piece: Blob) => {
      try {
        return await r.put(offset, piece)
      } catch {
        retried = true
        return r.put(offset, piece) // the page sends it again; the router says it has it
      }
    }
    await sendInPieces(file, 10, put)
    expect(retried).toBe(true)
    expect(r.got).toEqual(Array.from({ length: 25 }, (_, i) => i))
  })
  it('gives up on a router that never agrees', async () => {
    const put = async (): Promise<PieceAnswer> => ({ ok: false, received: 0 })
    await expect(sendInPieces(file, 10, put)).rejects.toThrow(/start it again/)
  })
})
