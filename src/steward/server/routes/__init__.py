"""The API's routes, one router per resource; the shared state comes in as a dependency
(``steward.server.state.State``), so no route is a closure over the application."""
