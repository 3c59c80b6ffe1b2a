"""The controller's read-only web view of the fleet: server-rendered HTML kept live over server-sent events.

``html`` draws the cards that ``gpudra.planning`` assembles, ``state`` keeps them current from watches, and
``server`` serves the page and the stream of changed fragments."""
