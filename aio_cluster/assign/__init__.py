"""Who should own what: the pure assignment strategies and the published sticky target.

Pure: no I/O, nothing here imports a server package; property-tested without servers.

Modules::

    marks.py         Mark: what a member cannot read, and which members are barred from what
    racks.py         Placement: the members' and replicas' racks, and the most local shares
    shares.py        Share: one member's part of a target, and who watches the registrations
    strategies.py    Strategy and the assignments it names (sticky, range, round-robin)
    subscription.py  Subscription: the topics a member reads (names, or a pattern)
    target.py        StickyTarget, the leader rule and the next target to publish
"""
