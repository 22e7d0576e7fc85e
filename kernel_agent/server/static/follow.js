/* Keeping the live round in view: while a run of the open thread is live, the page stays scrolled to
   its newest output, unless the reader scrolled away from the bottom (to read an earlier round); back
   at the bottom, it follows again. Owns only the window's scroll position. No network, no drawing. */
"use strict";

window.KA = window.KA || {};

KA.Follower = (() => {
  const SLACK = 48;  // px from the bottom that still count as "at the bottom"

  class Follower {
    /* content: the element whose growth is followed; live(): whether anything in it is live now. */
    constructor(content, live) {
      this.content = content;
      this.live = live;
      this.following = true;
      this.ours = null;  // the scroll position we asked for last: the scroll event it causes is not the reader's
      window.addEventListener("scroll", () => this.scrolled(), { passive: true });
      new ResizeObserver(() => this.keep()).observe(content);
    }

    get scroller() { return document.scrollingElement || document.documentElement; }

    atBottom() {
      const s = this.scroller;
      return s.scrollHeight - s.scrollTop - s.clientHeight <= SLACK;
    }

    /* A scroll the reader made decides: away from the bottom stops following, back at it resumes. */
    scrolled() {
      const top = this.scroller.scrollTop;
      if (this.ours !== null && Math.abs(top - this.ours) < 2) { this.ours = null; return; }
      this.ours = null;
      this.following = this.atBottom();
    }

    /* The content changed size: stay at the bottom if following and something is live. */
    keep() {
      if (!this.following || !this.live() || this.atBottom()) return;
      const s = this.scroller;
      this.ours = s.scrollHeight - s.clientHeight;
      window.scrollTo(0, this.ours);
    }

    /* A thread opened or a run started: follow from here. */
    resume() {
      this.following = true;
      this.keep();
    }
  }

  return Follower;
})();
