// One reading of a server event for every transport: a message that is not
// JSON becomes a client-side error event, so the page shows it instead of
// losing it (a browser has no other place to report it).
export function deliverServerEvent(text, onEvent) {
  let ev;
  try {
    ev = JSON.parse(text);
  } catch (err) {
    onEvent({ type: 'error', error: { type: 'client_error', code: 'bad_json', message: String(err) } });
    return;
  }
  onEvent(ev);
}
