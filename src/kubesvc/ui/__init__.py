"""The Service map in the browser: Services -> EndpointSlices -> endpoints -> Pods -> Nodes.

* ``graph``: the map as data, a pure function of the API's objects and the proxies' health;
* ``routes``: ``/ui/`` under the apiserver, behind its authentication and authorization;
* ``static/``: the page (plain HTML, CSS and JavaScript shipped with the package: nothing is
  fetched from the network at install or run time). The page only draws what ``graph`` built and
  asks for it again when a watch says something changed.
"""
