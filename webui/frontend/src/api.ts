// Talks to the Flask backend: every state-changing call carries the CSRF token.

import type { Device } from './lib/board'

export interface User { id: number; username: string; role: 'owner' | 'member' | 'kiosk' | 'satellite' }
export interface Health { controller: boolean | null; hwdb: boolean | null }
export interface Session {
  setup_required: boolean
  /** The first-run page may make this box an access point of the household's router instead. */
  can_be_access_point?: boolean
  user: User | null
  csrf_token: string
  health: Health
}
export interface DeviceReply { device: Device }

let csrf = ''

export class ApiError extends Error {
  constructor(public status: number, message: string, public code?: string, public component?: string,
              public detail: Record<string, unknown> = {}) {
    super(message)
  }
}

export function setCsrf(token: string) {
  csrf = token
}

/** What to show for a failed call: the router's own words when it gave some. */
export function errorMessage(e: unknown): string {
  return e instanceof Error ? e.message : String(e)
}

/** One call to the backend; `T` is the shape of its JSON answer (see openapi.yaml). A Blob body
 * (a piece of a firmware update) is sent as it is, anything else as JSON. */
export async function api<T = unknown>(method: string, path: string, body?: unknown): Promise<T> {
  const binary = body instanceof Blob
  let resp: Response
  try {
    resp = await fetch(path, {
      method,
      credentials: 'same-origin',
      headers: {
        'Content-Type': binary ? 'application/octet-stream' : 'application/json',
        ...(method === 'GET' ? {} : { 'X-CSRF-Token': csrf }),
      },
      body: body === undefined ? undefined : binary ? body : JSON.stringify(body),
    })
  } catch {
    throw new ApiError(0, 'The router is not answering. Is this device still on the home network?')
  }
  const data = resp.headers.get('Content-Type')?.includes('json') ? await resp.json() : { error: await resp.text() }
  if (!resp.ok) throw new ApiError(resp.status, data.error || resp.statusText, data.code, data.component, data)
  if (data && typeof data.csrf_token === 'string') csrf = data.csrf_token
  return data as T
}
