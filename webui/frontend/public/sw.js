// The phone page's service worker. It shows the page's notifications (registration.showNotification,
// so they also appear while the page is in the background) and brings the page forward when one is
// tapped. It caches nothing and handles no fetch: the page is only useful live, from the router.
self.addEventListener('install', () => self.skipWaiting())
self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()))
self.addEventListener('notificationclick', (event) => {
  event.notification.close()
  event.waitUntil(
    self.clients.matchAll({ type: 'window', includeUncontrolled: true })
      .then((pages) => (pages.length ? pages[0].focus() : self.clients.openWindow('/'))),
  )
})
