// The live feed: one WebSocket to /api/v1/live, reconnected with backoff whenever it drops.
// Each (re)connect starts with a snapshot, then deltas. Nothing here polls.
export class LiveFeed {
  constructor(onMessage, onState) {
    this.onMessage = onMessage;
    this.onState = onState;
    this.backoffMs = 250;
    this.connect();
  }

  connect() {
    const url = (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/api/v1/live';
    this.onState('connecting');
    const ws = new WebSocket(url);
    this.ws = ws;
    ws.onopen = () => { this.backoffMs = 250; this.onState('open'); };
    ws.onmessage = (ev) => {
      try { this.onMessage(JSON.parse(ev.data)); } catch (e) { console.error('live message', e); }
    };
    ws.onclose = () => {
      this.onState('closed');
      // Reconnect after a growing pause (a restarting collector is back within seconds).
      setTimeout(() => this.connect(), this.backoffMs);
      this.backoffMs = Math.min(this.backoffMs * 2, 5000);
    };
    ws.onerror = () => ws.close();
  }
}
