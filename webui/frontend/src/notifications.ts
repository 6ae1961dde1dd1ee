// System notifications on a household member's phone (issue 23, "told when something joins").
// The browser's side: whether it can, the household's permission (asked only when they press the
// button), the service worker that shows them also while the page is in the background. Where a
// part is missing (a plain-http address, an old browser) this does nothing, without an error.
import { reactive } from 'vue'
import { noticeFor, Shown, type Alert } from './lib/notify'

export const notifications = reactive({
  // 'unavailable': no Notifications API here, or not a secure context (https or localhost),
  // where browsers refuse to ask.
  permission: permissionNow(),
  role: '',
})

let worker: Promise<ServiceWorkerRegistration | null> = Promise.resolve(null)
const shown = new Shown()

function permissionNow(): NotificationPermission | 'unavailable' {
  return typeof Notification !== 'undefined' && window.isSecureContext ? Notification.permission : 'unavailable'
}

/** Who the page is signed in as (a wall panel is never notified), and the service worker, which
 * only exists in a secure context. */
export function notifyAs(role: string) {
  notifications.role = role
  notifications.permission = permissionNow()
  if (role === 'kiosk' || !('serviceWorker' in navigator) || !window.isSecureContext) return
  worker = navigator.serviceWorker.register('/sw.js').then(
    () => navigator.serviceWorker.ready,
    () => null,
  )
}

/** The household's "Tell me when something joins". */
export async function allowNotifications() {
  if (notifications.permission === 'unavailable') return
  notifications.permission = await Notification.requestPermission()
}

/** An alert from the live stream: shown once, if it is one to tell and the household allowed it. */
export async function notify(alert: Alert) {
  const notice = noticeFor(alert, notifications.role)
  if (!notice || permissionNow() !== 'granted' || !shown.first(notice.tag)) return
  const options = { body: notice.body, tag: notice.tag, icon: '/icon-192.png' }
  const registration = await worker
  try {
    if (registration) await registration.showNotification(notice.title, options)
    else new Notification(notice.title, options)
  } catch {
    // Some browsers (Chrome on Android) allow notifications only through a service worker.
  }
}
